// nn::SGD: torch.optim.SGD with momentum; state (momentum buffers) lives on each parameter's
// device, created at the first step.
#include "furnace/error.h"
#include "furnace/nn.h"

namespace furnace {

SGD::SGD(std::vector<Parameter> params, float lr_, float momentum_, float weight_decay_)
    : lr(lr_), momentum(momentum_), weight_decay(weight_decay_), params_(std::move(params)) {
  FURNACE_CHECK(lr >= 0.0f) << "Invalid learning rate: " << lr;
  FURNACE_CHECK(momentum >= 0.0f) << "Invalid momentum value: " << momentum;
  FURNACE_CHECK(weight_decay >= 0.0f) << "Invalid weight_decay value: " << weight_decay;
  momentum_buffers_.resize(params_.size());
}

void SGD::step(OpContext& ctx) {
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    if (!p.grad->defined()) continue;  // no gradient: PyTorch skips the parameter
    Tensor& buf = momentum_buffers_[i];
    const bool first = momentum != 0.0f && !buf.defined();
    if (first) buf = Tensor::empty(ctx.rt, p.value->device(), p.value->shape());
    // Each parameter is updated on its own device (and ctx's stream), as torch.optim does.
    OpContext on_device{ctx.rt, p.value->device().index, ctx.stream};
    ops::sgd_momentum_step(on_device, *p.value, *p.grad, buf, lr, momentum, weight_decay, first);
  }
  ++steps_;
}

void SGD::load_state(std::vector<Tensor> momentum_buffers, int64_t steps) {
  FURNACE_CHECK(momentum_buffers.size() == params_.size())
      << "optimizer state has " << momentum_buffers.size() << " momentum buffers for "
      << params_.size() << " parameters";
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& b = momentum_buffers[i];
    if (!b.defined()) continue;
    FURNACE_CHECK(b.shape() == params_[i].value->shape() && b.device() == params_[i].value->device())
        << "momentum buffer of " << params_[i].name << ": shape " << shape_str(b.shape()) << " on "
        << b.device().str() << ", the parameter is " << shape_str(params_[i].value->shape()) << " on "
        << params_[i].value->device().str();
  }
  FURNACE_CHECK(steps >= 0) << "optimizer step count " << steps << " is negative";
  momentum_buffers_ = std::move(momentum_buffers);
  steps_ = steps;
}

void SGD::zero_grad(OpContext&) {
  for (Parameter& p : params_) *p.grad = Tensor();  // set_to_none=True
}

}  // namespace furnace
