// nn::SGD: torch.optim.SGD with momentum; state (momentum buffers) lives on each parameter's
// device, created at the first step.
#include "furnace/error.h"
#include "furnace/nn.h"

namespace furnace {

SGD::SGD(std::vector<Parameter> params, float lr_, float momentum_, float weight_decay_)
    : Optimizer(std::move(params), lr_), momentum(momentum_), weight_decay(weight_decay_) {
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

std::vector<OptimizerStateEntry> SGD::state(size_t i) const {
  const Tensor& buf = momentum_buffers_.at(i);
  if (!buf.defined()) return {};
  return {{"momentum_buffer", buf, 0}};
}

void SGD::load_state(std::vector<std::vector<OptimizerStateEntry>> per_param, int64_t steps) {
  check_state_count(per_param.size(), steps);
  std::vector<Tensor> buffers(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    for (OptimizerStateEntry& e : per_param[i]) {
      FURNACE_CHECK(e.key == "momentum_buffer") << "SGD has no state '" << e.key << "' (parameter " << i << ")";
      check_state_tensor(i, e.key, e.tensor);
      buffers[i] = std::move(e.tensor);
    }
  }
  momentum_buffers_ = std::move(buffers);
  steps_ = steps;
}

}  // namespace furnace
