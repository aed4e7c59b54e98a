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

namespace {
// x.to(dt): a new tensor on the same device, or x itself when it already has that dtype.
Tensor cast_to(OpContext& ctx, const Tensor& x, DType dt) {
  if (x.dtype() == dt) return x;
  Tensor out = Tensor::empty(ctx.rt, x.device(), x.shape(), dt);
  ops::cast(ctx, out, x);
  return out;
}
}  // namespace

Tensor Linear::forward(OpContext& ctx, const Tensor& x) {
  const DType dt = is_half(ctx.autocast) ? ctx.autocast : DType::f32;
  Tensor in = cast_to(ctx, x, dt);
  const Tensor* w = &weight;
  const Tensor* b = &bias;
  if (dt != DType::f32) {  // autocast: linear runs on 16-bit copies of the fp32 master parameters
    weight_half_ = cast_to(ctx, weight, dt);
    bias_half_ = cast_to(ctx, bias, dt);
    w = &weight_half_;
    b = &bias_half_;
  }
  Tensor out = Tensor::empty(rt_, Device::at(device_), {x.size(0), out_features}, dt);
  ops::linear_forward(ctx, out, in, *w, *b);
  input_ = in;
  return out;
}

Tensor Linear::backward(OpContext& ctx, const Tensor& dout, bool need_dinp, WeightGradSink* sink,
                        size_t layer) {
  FURNACE_CHECK(input_.defined()) << "Linear.backward called without a forward";
  // .grad is created by the first backward after zero_grad() (set_to_none): AccumulateGrad takes
  // that backward's gradient as it is, later backwards (accumulation micro-steps) add to it.
  const bool fresh = !grad_weight.defined();
  const DType dt = input_.dtype();
  FURNACE_CHECK(!sink || (fresh && dt == DType::f32))
      << "Linear.backward: only an fp32 first backward hands its weight gradient elsewhere";
  if (fresh) {
    grad_weight = Tensor::empty(rt_, Device::at(device_), weight.shape());
    grad_bias = Tensor::empty(rt_, Device::at(device_), bias.shape());
  }
  // Under autocast the forward ran in 16 bits: the incoming gradient is cast to match (the
  // backward of the cast that fed the loss), and the weight copy from forward is used.
  Tensor g = cast_to(ctx, dout, dt);
  const Tensor& w = dt == DType::f32 ? weight : weight_half_;
  Tensor dinp;
  if (need_dinp) dinp = Tensor::empty(rt_, Device::at(device_), input_.shape(), dt);
  ops::linear_backward(ctx, need_dinp ? &dinp : nullptr, grad_weight, grad_bias, g, input_, w,
                       /*accumulate=*/!fresh, /*weight_grad_elsewhere=*/sink != nullptr);
  if (sink) sink->take(layer, g, input_);
  weight_half_ = Tensor();
  bias_half_ = Tensor();
  return dinp;
}

}  // namespace furnace
