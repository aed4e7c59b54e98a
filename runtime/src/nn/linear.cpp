// nn::Linear: parameters on one device, forward saves its input, backward accumulates grads.
#include "furnace/error.h"
#include "furnace/nn.h"

namespace furnace {

Linear::Linear(Runtime& rt, int device, int in, int out, bool allocate)
    : in_features(in), out_features(out), rt_(rt), device_(device) {
  FURNACE_CHECK(in > 0 && out > 0) << "Linear(" << in << ", " << out << "): sizes must be positive";
  if (!allocate) return;
  weight = Tensor::empty(rt, Device::at(device), {out, in});
  bias = Tensor::empty(rt, Device::at(device), {out});
}

void Linear::to(OpContext& ctx, int device) {
  if (device == device_) return;
  for (Tensor* t : {&weight, &bias, &grad_weight, &grad_bias}) {
    if (!t->defined()) continue;
    Tensor moved = Tensor::empty(rt_, Device::at(device), t->shape(), t->dtype());
    ops::copy_(ctx, moved, *t);
    *t = moved;  // the old block goes back to its device's allocator
  }
  device_ = device;
}

Tensor Linear::forward(OpContext& ctx, const Tensor& x) {
  Tensor out = Tensor::empty(rt_, Device::at(device_), {x.size(0), out_features});
  ops::linear_forward(ctx, out, x, weight, bias);
  input_ = x;
  return out;
}

Tensor Linear::backward(OpContext& ctx, const Tensor& dout, bool need_dinp) {
  FURNACE_CHECK(input_.defined()) << "Linear.backward called without a forward";
  if (!grad_weight.defined()) {  // .grad is created by the first backward after zero_grad()
    grad_weight = Tensor::empty(rt_, Device::at(device_), weight.shape());
    grad_bias = Tensor::empty(rt_, Device::at(device_), bias.shape());
    ops::zero(ctx, grad_weight);
    ops::zero(ctx, grad_bias);
  }
  Tensor dinp;
  if (need_dinp) dinp = Tensor::empty(rt_, Device::at(device_), input_.shape());
  ops::linear_backward(ctx, need_dinp ? &dinp : nullptr, grad_weight, grad_bias, dout, input_, weight);
  return dinp;
}

}  // namespace furnace
