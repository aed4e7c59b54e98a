// nn::AdamW: torch.optim.AdamW (PyTorch 1.13's _single_tensor_adamw); the per-element update is
// ops::adamw_step. State is created at a parameter's first step, on its device.
#include "furnace/error.h"
#include "furnace/nn.h"

namespace furnace {

AdamW::AdamW(std::vector<Parameter> params, float lr_, float beta1_, float beta2_, float eps_,
             float weight_decay_)
    : Optimizer(std::move(params), lr_), beta1(beta1_), beta2(beta2_), eps(eps_), weight_decay(weight_decay_) {
  // torch.optim.AdamW's constructor checks, in its words.
  FURNACE_CHECK(eps >= 0.0f) << "Invalid epsilon value: " << eps;
  FURNACE_CHECK(beta1 >= 0.0f && beta1 < 1.0f) << "Invalid beta parameter at index 0: " << beta1;
  FURNACE_CHECK(beta2 >= 0.0f && beta2 < 1.0f) << "Invalid beta parameter at index 1: " << beta2;
  FURNACE_CHECK(weight_decay >= 0.0f) << "Invalid weight_decay value: " << weight_decay;
  state_.resize(params_.size());
}

void AdamW::step(OpContext& ctx) {
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    if (!p.grad->defined()) continue;  // no gradient: no update, no state, no step counted
    ParamState& st = state_[i];
    OpContext on_device{ctx.rt, p.value->device().index, ctx.stream};
    if (st.step == 0) {  // state['exp_avg'] = zeros_like(p), state['exp_avg_sq'] = zeros_like(p)
      st.exp_avg = Tensor::empty(ctx.rt, p.value->device(), p.value->shape());
      st.exp_avg_sq = Tensor::empty(ctx.rt, p.value->device(), p.value->shape());
      ops::zero(on_device, st.exp_avg);
      ops::zero(on_device, st.exp_avg_sq);
    }
    ++st.step;  // step_t += 1, before the update uses it
    ops::adamw_step(on_device, *p.value, *p.grad, st.exp_avg, st.exp_avg_sq, lr, beta1, beta2, eps,
                    weight_decay, st.step);
  }
  ++steps_;
}

std::vector<OptimizerStateEntry> AdamW::state(size_t i) const {
  const ParamState& st = state_.at(i);
  if (st.step == 0) return {};
  return {{"step", Tensor(), st.step}, {"exp_avg", st.exp_avg, 0}, {"exp_avg_sq", st.exp_avg_sq, 0}};
}

void AdamW::load_state(std::vector<std::vector<OptimizerStateEntry>> per_param, int64_t steps) {
  check_state_count(per_param.size(), steps);
  std::vector<ParamState> loaded(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (per_param[i].empty()) continue;
    ParamState& st = loaded[i];
    bool has_step = false;
    for (OptimizerStateEntry& e : per_param[i]) {
      if (e.key == "step") {
        FURNACE_CHECK(e.count >= 1) << "AdamW state 'step' of parameter " << i << " is " << e.count
                                    << ": a stepped parameter has step >= 1";
        st.step = e.count;
        has_step = true;
      } else if (e.key == "exp_avg" || e.key == "exp_avg_sq") {
        check_state_tensor(i, e.key, e.tensor);
        (e.key == "exp_avg" ? st.exp_avg : st.exp_avg_sq) = std::move(e.tensor);
      } else {
        FURNACE_FAIL() << "AdamW has no state '" << e.key << "' (parameter " << i << ")";
      }
    }
    FURNACE_CHECK(has_step && st.exp_avg.defined() && st.exp_avg_sq.defined())
        << "AdamW state of parameter " << i << " needs step, exp_avg and exp_avg_sq together";
  }
  state_ = std::move(loaded);
  steps_ = steps;
}

}  // namespace furnace
