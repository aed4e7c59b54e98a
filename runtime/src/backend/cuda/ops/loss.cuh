// backend/cuda/ops/loss: softmax cross-entropy (forward per row, backward elementwise) and the per-row
// accuracy test. The sums over rows are CUB reductions (reductions.cuh), done by the caller.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace furnace::cuda {

// What a loss forward hands back to the host in one copy.
struct LossScalars {
  float sum;        // sum of the rows' losses
  int32_t bad;      // 1 when a target was outside [0, V)
  int32_t bad_target;  // one such target
};

// probs (B, V) = softmax(logits); row_loss (B) = -log probs[target]. A target outside [0, V) sets
// scalars->bad (zero it first) and makes its row's loss NaN; nothing is read out of bounds.
void softmax_cross_entropy_rows(cudaStream_t stream, float* probs, float* row_loss,
                                const float* logits, const int32_t* targets, int B, int V,
                                LossScalars* scalars);
// dlogits = (probs - onehot(targets)) * scale, scale = dloss / B.
void softmax_cross_entropy_backward(cudaStream_t stream, float* dlogits, const float* probs,
                                    const int32_t* targets, int B, int V, float scale,
                                    int64_t max_blocks);
// correct[b] = 1 when row b's first maximum (a strict `>` scan, as ref::accuracy_count) is at
// targets[b], else 0.
void accuracy_rows(cudaStream_t stream, int32_t* correct, const float* logits,
                   const int32_t* targets, int B, int V, int64_t max_blocks);

}  // namespace furnace::cuda
