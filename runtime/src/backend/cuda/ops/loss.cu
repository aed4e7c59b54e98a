// backend/cuda/ops/loss: softmax cross-entropy and the accuracy test, row by row.
#include "backend/cuda/ops/loss.cuh"

#include <cmath>

#include "backend/cuda/ops/launch.cuh"

namespace furnace::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;  // one warp per row

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// ---- kernels ------------------------------------------------------------------------------------

// One warp per row: the row's max, the sum of exp(x - max), then probs and the row's loss
// -(x[t] - max - log(sum)), the log-sum-exp form the reference uses.
__global__ void softmax_xent_rows_kernel(float* probs, float* row_loss, const float* logits,
                                         const int32_t* targets, int B, int V,
                                         LossScalars* scalars) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= B) return;  // the whole warp leaves together: the shuffles below see full warps
  const float* x = logits + row * V;
  float* p = probs + row * V;
  float m = -INFINITY;
  for (int v = lane; v < V; v += kWarp) m = fmaxf(m, x[v]);
  m = warp_max(m);
  float s = 0.0f;
  for (int v = lane; v < V; v += kWarp) s = __fadd_rn(s, expf(__fsub_rn(x[v], m)));
  s = warp_sum(s);
  for (int v = lane; v < V; v += kWarp) p[v] = __fdiv_rn(expf(__fsub_rn(x[v], m)), s);
  if (lane == 0) {
    const int32_t t = targets[row];
    if (t < 0 || t >= V) {
      if (atomicCAS(&scalars->bad, 0, 1) == 0) scalars->bad_target = t;
      row_loss[row] = NAN;
    } else {
      row_loss[row] = -(__fsub_rn(__fsub_rn(x[t], m), logf(s)));
    }
  }
}

__global__ void softmax_xent_backward_kernel(float* dlogits, const float* probs,
                                             const int32_t* targets, int64_t n, int V,
                                             float scale) {
  for (int64_t i : GridStride{n}) {
    const int64_t row = i / V;
    const int v = static_cast<int>(i - row * V);
    const float onehot = targets[row] == v ? 1.0f : 0.0f;
    dlogits[i] = __fmul_rn(__fsub_rn(probs[i], onehot), scale);
  }
}

// One thread per row, scanning left to right with a strict `>`: the first maximum wins, and a NaN
// neither wins nor is beaten once it is the best, exactly as ref::accuracy_count.
__global__ void accuracy_rows_kernel(int32_t* correct, const float* logits, const int32_t* targets,
                                     int B, int V) {
  for (int64_t row : GridStride{B}) {
    const float* x = logits + row * V;
    int best = 0;
    for (int v = 1; v < V; ++v)
      if (x[v] > x[best]) best = v;
    correct[row] = best == targets[row] ? 1 : 0;
  }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void softmax_cross_entropy_rows(cudaStream_t stream, float* probs, float* row_loss,
                                const float* logits, const int32_t* targets, int B, int V,
                                LossScalars* scalars) {
  const unsigned blocks = row_blocks(B, kRowsPerBlock);
  if (blocks == 0) return;
  softmax_xent_rows_kernel<<<blocks, kRowsPerBlock * kWarp, 0, stream>>>(probs, row_loss, logits,
                                                                         targets, B, V, scalars);
  FURNACE_CUDA_CHECK(cudaGetLastError());
}

void softmax_cross_entropy_backward(cudaStream_t stream, float* dlogits, const float* probs,
                                    const int32_t* targets, int B, int V, float scale,
                                    int64_t max_blocks) {
  if (V <= 0) return;
  const int64_t n = static_cast<int64_t>(B) * V;
  launch_elementwise(stream, n, max_blocks, softmax_xent_backward_kernel, dlogits, probs, targets,
                     n, V, scale);
}

void accuracy_rows(cudaStream_t stream, int32_t* correct, const float* logits,
                   const int32_t* targets, int B, int V, int64_t max_blocks) {
  launch_elementwise(stream, B, max_blocks, accuracy_rows_kernel, correct, logits, targets, B, V);
}

}  // namespace furnace::cuda
