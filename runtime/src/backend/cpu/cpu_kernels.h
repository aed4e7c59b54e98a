// backend/cpu/cpu_kernels: the fast CPU kernels behind the host's and the simulator's op table (OpenBLAS sgemm, vectorisable loops). Same names
// and signatures as ops/ref/ref_ops.h, and tested against them.
#pragma once

#include <cstdint>

#include "furnace/dtype.h"

namespace furnace::cpu {
#include "backend/cpu/kernel_declarations.inc"

// OpenBLAS's thread count for the GEMMs above (process-wide).
int blas_threads();
void set_blas_threads(int threads);
}  // namespace furnace::cpu
