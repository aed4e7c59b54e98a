// backend/cuda/ops/elementwise: launchers of the small elementwise kernels (relu, cast, add, the bias
// broadcast that starts a Linear's output, and the accumulation of 16-bit gradients into fp32).
// Each takes the stream to run on, launches nothing for an empty tensor, and checks the launch.
// `max_blocks` caps the grid (launch_config.h, max_blocks_for).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "furnace/dtype.h"

namespace furnace::cuda {

// x = max(x, 0) in place; NaN stays NaN (only x < 0 becomes +0).
void relu_forward(cudaStream_t stream, void* x, int64_t n, DType dt, int64_t max_blocks);
// dx = 0 where !(out > 0).
void relu_backward(cudaStream_t stream, void* dx, const void* out, int64_t n, DType dt,
                   int64_t max_blocks);
// out = in converted (f32 -> f16/bf16 rounds to nearest even; f16/bf16 -> f32 is exact).
void cast(cudaStream_t stream, void* out, DType out_dt, const void* in, DType in_dt, int64_t n,
          int64_t max_blocks);
// out = in * alpha (f32, each product rounded once); out may alias in.
void mul_scalar(cudaStream_t stream, float* out, const float* in, float alpha, int64_t n,
                int64_t max_blocks);
// out = a + b (f32, each sum rounded once); out may alias a or b.
void add(cudaStream_t stream, float* out, const float* a, const float* b, int64_t n,
         int64_t max_blocks);
// out (rows, cols) = bias (cols) on every row, elements of dt (bits copied).
void broadcast_rows(cudaStream_t stream, void* out, const void* bias, int rows, int cols, DType dt,
                    int64_t max_blocks);
// dst (f32) += float(src) elementwise, src of the 16-bit dt.
void accumulate_half(cudaStream_t stream, float* dst, const void* src, int64_t n, DType dt,
                     int64_t max_blocks);

}  // namespace furnace::cuda
