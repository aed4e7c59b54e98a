// ops/ref: plain loops, in double where it matters, no BLAS, no tricks: the truth the `sim` and
// `cuda` ops are tested against. Same names and signatures as ops/sim/sim_ops.h.
#pragma once

#include <cstdint>

namespace furnace::ref {

// out (B, OC) = inp (B, C) @ weight (OC, C)^T + bias (OC); bias may be null.
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                    int C, int OC);
// ACCUMULATES into dweight (OC, C) and dbias (OC); WRITES dinp (B, C) unless null.
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int B, int C, int OC);
void relu_forward(float* x, int64_t n);                            // in place
void relu_backward(float* dx, const float* out, int64_t n);        // dx *= (out > 0)
// Returns the mean loss; writes probs (B, V).
float softmax_cross_entropy_forward(float* probs, const float* logits, const int32_t* targets,
                                    int B, int V);
// Writes dlogits (B, V) = (probs - onehot) * dloss / B.
void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                    int B, int V, float dloss);
int64_t accuracy_count(const float* logits, const int32_t* targets, int B, int V);
void sgd_momentum_step(float* param, const float* grad, float* buf, int64_t n, float lr,
                       float momentum, float weight_decay, bool first_step);

}  // namespace furnace::ref
