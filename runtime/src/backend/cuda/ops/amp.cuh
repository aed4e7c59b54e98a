// backend/cuda/ops/amp: GradScaler's unscale kernel: the non-finite check and the multiplication by
// inv_scale fused in one pass over the gradient (torch._amp_foreach_non_finite_check_and_unscale_).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace furnace::cuda {

// *found_inf = 1.0f if any grad element is inf or NaN (left alone otherwise: it accumulates over
// calls); grad *= inv_scale, every element, unless inv_scale == 1.
void non_finite_check_and_unscale(cudaStream_t stream, float* grad, int64_t n, float inv_scale,
                                  float* found_inf, int64_t max_blocks);

}  // namespace furnace::cuda
