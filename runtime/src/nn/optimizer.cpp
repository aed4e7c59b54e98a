// nn::Optimizer: what SGD and AdamW share (parameters, lr, zero_grad, the step count, the check
// on state handed to load_state).
#include "furnace/error.h"
#include "furnace/nn.h"

namespace furnace {

Optimizer::Optimizer(std::vector<Parameter> params, float lr_) : lr(lr_), params_(std::move(params)) {
  FURNACE_CHECK(lr >= 0.0f) << "Invalid learning rate: " << lr;
}

void Optimizer::zero_grad(OpContext&) {
  for (Parameter& p : params_) *p.grad = Tensor();  // set_to_none=True
}

void Optimizer::check_state_count(size_t entries, int64_t steps) const {
  FURNACE_CHECK(entries == params_.size())
      << "optimizer state has entries for " << entries << " parameters, the optimizer has " << params_.size();
  FURNACE_CHECK(steps >= 0) << "optimizer step count " << steps << " is negative";
}

void Optimizer::check_state_tensor(size_t i, const std::string& key, const Tensor& t) const {
  const Tensor& value = *params_.at(i).value;
  FURNACE_CHECK(t.defined() && t.shape() == value.shape() && t.device() == value.device())
      << key << " of " << params_[i].name << ": "
      << (t.defined() ? "shape " + shape_str(t.shape()) + " on " + t.device().str() : std::string("missing"))
      << ", the parameter is " << shape_str(value.shape()) << " on " << value.device().str();
}

}  // namespace furnace
