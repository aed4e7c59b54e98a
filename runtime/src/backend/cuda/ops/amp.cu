// backend/cuda/ops/amp: the fused non-finite check and unscale. Each block ORs its threads' findings with
// cub::BlockReduce and one thread writes the flag, instead of every thread that saw an inf.
#include "backend/cuda/ops/amp.cuh"

#include <cub/block/block_reduce.cuh>

#include "backend/cuda/ops/launch.cuh"

namespace furnace::cuda {
namespace {

// ---- kernels ------------------------------------------------------------------------------------

template <int kBlock>
__global__ void non_finite_check_and_unscale_kernel(float* grad, int64_t n, float inv_scale,
                                                    float* found_inf) {
  using BlockReduce = cub::BlockReduce<int, kBlock>;
  __shared__ typename BlockReduce::TempStorage temp;
  int bad = 0;
  for (int64_t i : GridStride{n}) {
    const float v = grad[i];
    bad |= isfinite(v) ? 0 : 1;
    if (inv_scale != 1.0f) grad[i] = __fmul_rn(v, inv_scale);
  }
  const int any = BlockReduce(temp).Sum(bad);  // valid in thread 0
  if (threadIdx.x == 0 && any > 0) *found_inf = 1.0f;
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void non_finite_check_and_unscale(cudaStream_t stream, float* grad, int64_t n, float inv_scale,
                                  float* found_inf, int64_t max_blocks) {
  // The block size is the kernel's template argument: launch_elementwise uses the same one.
  launch_elementwise(stream, n, max_blocks, non_finite_check_and_unscale_kernel<kElementwiseBlock>,
                     grad, n, inv_scale, found_inf);
}

}  // namespace furnace::cuda
