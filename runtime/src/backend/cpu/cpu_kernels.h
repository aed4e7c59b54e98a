// backend/cpu/cpu_kernels: the fast CPU kernels behind the host's and the simulator's op table (OpenBLAS sgemm, vectorisable loops). Same names
// and signatures as ops/ref/ref_ops.h, and tested against them.
#pragma once

#include <cstdint>
#include <string>

#include "furnace/dtype.h"

namespace furnace::cpu {
#include "backend/cpu/kernel_declarations.inc"

// linear_backward's three parts, each alone: dinp (B, C) written; dweight (OC, C) and dbias (OC)
// written, or added to when accumulate; dweight's product scaled by alpha first.
void linear_input_grad(float* dinp, const float* dout, const float* weight, int B, int C, int OC);
void linear_weight_grad(float* dweight, const float* dout, const float* inp, int B, int C, int OC,
                        bool accumulate, float alpha = 1.0f);
void linear_bias_grad(float* dbias, const float* dout, int B, int OC, bool accumulate);

// OpenBLAS's thread count for the GEMMs above (process-wide).
int blas_threads();
void set_blas_threads(int threads);
std::string blas_kernel();  // openblas_get_corename()
}  // namespace furnace::cpu
