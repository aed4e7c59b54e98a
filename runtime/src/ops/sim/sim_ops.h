// ops/sim: the fast CPU ops the simulator runs (OpenBLAS sgemm, vectorisable loops). Same names
// and signatures as ops/ref/ref_ops.h, and tested against them.
#pragma once

#include <cstdint>

#include "furnace/dtype.h"

namespace furnace::sim {
#include "ops/op_declarations.inc"

// OpenBLAS's thread count for the GEMMs above (process-wide).
int blas_threads();
void set_blas_threads(int threads);
}  // namespace furnace::sim
