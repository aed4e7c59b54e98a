// backend/cuda/ops/optimizer: the optimizers' elementwise updates, with the same float operations in the
// same order as ops/ref (no contraction into FMA), so the results are bit-identical.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cpu/adamw_scalars.h"

namespace furnace::cuda {

// torch.optim.SGD (dampening 0, no nesterov): buf may be null when momentum is 0.
void sgd_momentum_step(cudaStream_t stream, float* param, const float* grad, float* buf, int64_t n,
                       float lr, float momentum, float weight_decay, bool first_step,
                       int64_t max_blocks);
// torch.optim.AdamW's single-tensor update with the step's scalars (adamw_scalars.h).
void adamw_step(cudaStream_t stream, float* param, const float* grad, float* exp_avg,
                float* exp_avg_sq, int64_t n, const AdamWScalars& s, int64_t max_blocks);

}  // namespace furnace::cuda
