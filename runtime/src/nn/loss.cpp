// nn::CrossEntropyLoss: mean reduction; keeps the softmax for backward.
#include "furnace/nn.h"

namespace furnace {

float CrossEntropyLoss::forward(OpContext& ctx, const Tensor& logits, const Tensor& targets) {
  // cross_entropy is on autocast's fp32 list: 16-bit logits are cast up first.
  Tensor logits32 = logits;
  if (logits.dtype() != DType::f32) {
    logits32 = Tensor::empty(ctx.rt, logits.device(), logits.shape());
    ops::cast(ctx, logits32, logits);
  }
  probs_ = Tensor::empty(ctx.rt, logits.device(), logits.shape());
  targets_ = targets;
  return ops::softmax_cross_entropy_forward(ctx, probs_, logits32, targets);
}

Tensor CrossEntropyLoss::backward(OpContext& ctx, float dloss) {
  Tensor dlogits = Tensor::empty(ctx.rt, probs_.device(), probs_.shape());
  ops::softmax_cross_entropy_backward(ctx, dlogits, probs_, targets_, dloss);
  release();
  return dlogits;
}

}  // namespace furnace
