// ops/ref: plain loops, in double where it matters, no BLAS, no tricks: the truth the CPU and
// `cuda` ops are tested against. Same names and signatures as backend/cpu/cpu_kernels.h.
#pragma once

#include <cstdint>

#include "furnace/dtype.h"

namespace furnace::ref {
#include "backend/cpu/kernel_declarations.inc"
}  // namespace furnace::ref
