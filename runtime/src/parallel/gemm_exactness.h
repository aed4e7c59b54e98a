// parallel/gemm_exactness: whether a fused form of the host's weight-gradient GEMM gives the bits
// of the unfused one, asked of the OpenBLAS this process runs, once per shape. The simulator fuses
// what PyTorch runs as separate kernels (a GEMM, then a sum or a scale) only where this says yes:
// the answers depend on OpenBLAS's blocking, which differs between CPUs and versions, so they are
// measured here, not assumed. Each check runs fixed pseudo-random operands (signs, magnitudes,
// the exact zeros of ReLU outputs) both ways at the current OpenBLAS thread count, and compares
// every bit. Thread-safe; each answer is computed once per (shape, threads[, alpha]).
#pragma once

#include <cstdint>

namespace furnace::parallel {

// DataParallel's running sum (parallel/weight_grad_chain): ((dW_0 + dW_1) + dW_2), each dW a
// GEMM with beta 0, against dW_0 then two GEMMs with beta 1 into it. Holds while OpenBLAS makes
// each product in one pass over `rows`.
bool chain_is_exact(int out, int in, int64_t rows);

// DistributedDataParallel's scale (parallel/ddp): dW with alpha 1, then every element times
// alpha (ops::mul_scalar), against one GEMM with alpha. Holds where OpenBLAS applies alpha to each
// finished product with one rounding.
bool scaled_is_exact(int out, int in, int64_t rows, float alpha);

}  // namespace furnace::parallel
