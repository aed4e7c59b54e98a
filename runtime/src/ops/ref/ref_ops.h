// ops/ref: plain loops, in double where it matters, no BLAS, no tricks: the truth the `sim` and
// `cuda` ops are tested against. Same names and signatures as ops/sim/sim_ops.h.
#pragma once

#include <cstdint>

#include "furnace/dtype.h"

namespace furnace::ref {
#include "ops/op_declarations.inc"
}  // namespace furnace::ref
