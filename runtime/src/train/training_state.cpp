// The model's and optimizer's state between the devices and a checkpoint (train/training_state.h).
#include "train/training_state.h"

#include "furnace/error.h"
#include "train/checkpoint_meta.h"  // defines: optimizer_state_name, shape_text

namespace furnace {
namespace {

const char* kPrefix = "module.";

StateTensor to_host(Runtime& rt, const std::string& name, const Tensor& t) {
  StateTensor s{name, t.shape(), std::vector<float>(static_cast<size_t>(t.numel()))};
  OpContext ctx{rt, t.device().index, 0};
  ops::copy_to_host(ctx, s.values.data(), t);
  return s;
}

std::string widths_text(const std::vector<int>& sizes) {
  std::string s;
  for (int w : sizes) s += (s.empty() ? "" : "-") + std::to_string(w);
  return s;
}

std::string hidden_text(const std::vector<int>& hidden) {
  std::string s;
  for (int w : hidden) s += (s.empty() ? "" : ",") + std::to_string(w);
  return s;
}

}  // namespace

std::vector<StateTensor> capture_model(Runtime& rt, MLP& model, bool data_parallel) {
  std::vector<StateTensor> out;
  for (const Parameter& p : model.parameters())
    out.push_back(to_host(rt, (data_parallel ? kPrefix : "") + p.name, *p.value));
  return out;
}

std::vector<StateTensor> capture_optimizer_state(Runtime& rt, const Optimizer& optimizer) {
  std::vector<StateTensor> out;
  for (size_t i = 0; i < optimizer.parameters().size(); ++i)
    for (const OptimizerStateEntry& e : optimizer.state(i)) {
      const std::string name = "state." + std::to_string(i) + "." + e.key;
      if (e.tensor.defined()) out.push_back(to_host(rt, name, e.tensor));
      else out.push_back({name, {}, {static_cast<float>(e.count)}});  // torch.tensor(float(step))
    }
  return out;
}

void load_model_and_optimizer(Runtime& rt, MLP& model, Optimizer& optimizer, const Checkpoint& ck,
                              const std::string& wrapper, bool strict_keys, const std::string& path,
                              std::vector<std::string>& notes) {
  const bool data_parallel = !wrapper.empty();
  std::vector<Parameter> params = model.parameters();
  std::vector<std::string> model_keys, saved_keys;
  for (const Parameter& p : params) model_keys.push_back((data_parallel ? kPrefix : "") + p.name);
  std::map<std::string, const StateTensor*> saved;
  for (const StateTensor& t : ck.model) {
    saved_keys.push_back(t.name);
    saved[t.name] = &t;
  }
  const std::string cls = data_parallel ? wrapper : "Sequential";
  const KeyMatch match = match_state_dict_keys(saved_keys, model_keys);

  // PyTorch compares shapes of the keys both sides share (after the fix, for Furnace's load).
  auto size_errors = [&](bool after_fix) {
    std::vector<std::string> errors;
    for (size_t i = 0; i < params.size(); ++i) {
      std::string source = model_keys[i];
      if (after_fix) {
        auto it = match.source_of.find(model_keys[i]);
        if (it == match.source_of.end()) continue;
        source = it->second;
      } else if (!saved.count(source)) {
        continue;
      }
      const StateTensor& t = *saved.at(source);
      if (t.shape != params[i].value->shape())
        errors.push_back(size_mismatch_error(model_keys[i], t.shape, params[i].value->shape()));
    }
    return errors;
  };
  if (strict_keys) {
    const std::vector<std::string> sizes = size_errors(false);
    FURNACE_CHECK(match.missing.empty() && match.unexpected.empty() && sizes.empty())
        << "checkpoint " << path << " (--strict-keys, as PyTorch's model.load_state_dict): "
        << load_state_dict_error(cls, match.missing, match.unexpected, sizes);
  }
  const std::vector<std::string> sizes = size_errors(true);
  FURNACE_CHECK(match.loadable && sizes.empty())
      << "checkpoint " << path << " does not fit this model (MLP " << widths_text(model.sizes())
      << "; the checkpoint's scenario has --hidden " << hidden_text(ck.scenario.hidden) << "): "
      << load_state_dict_error(cls, match.residual_missing, match.residual_unexpected, sizes)
      << (match.fix != KeyMatch::Fix::none ? " (keys compared after fixing the \"module.\" prefix)" : "");
  for (const std::string& line : explain_module_prefix(match, saved_keys, model_keys, cls,
                                                         ck.saved_by == "Sequential" ? "DataParallel" : ck.saved_by)) notes.push_back(line);

  for (size_t i = 0; i < params.size(); ++i) {
    const StateTensor& t = *saved.at(match.source_of.at(model_keys[i]));
    OpContext ctx{rt, params[i].value->device().index, 0};
    ops::copy_to_device(ctx, *params[i].value, t.values.data());
  }
  // The optimizer's state is keyed by parameter index (param_groups[0]["params"]), the same in
  // both modes: the prefix never reaches it.
  FURNACE_CHECK(ck.optimizer_type == optimizer.type())
      << "checkpoint " << path << " holds the state of " << ck.optimizer_type << ", this run's optimizer is "
      << optimizer.type();
  std::vector<std::vector<OptimizerStateEntry>> state(params.size());
  for (const StateTensor& t : ck.optimizer_state) {
    const auto [i, key] = optimizer_state_name(t.name);
    FURNACE_CHECK(i >= 0 && static_cast<size_t>(i) < params.size())
        << "checkpoint " << path << ": optimizer state '" << t.name << "' names no parameter of this model";
    const Tensor& value = *params[static_cast<size_t>(i)].value;
    if (t.shape.empty() && key == "step") {  // a count, not a tensor on the device
      state[static_cast<size_t>(i)].push_back({key, Tensor(), static_cast<int64_t>(t.values.at(0))});
      continue;
    }
    FURNACE_CHECK(t.shape == value.shape())
        << "checkpoint " << path << ": optimizer state '" << t.name << "' has shape " << shape_text(t.shape)
        << ", parameter " << i << " of this model " << shape_text(value.shape());
    Tensor buf = Tensor::empty(rt, value.device(), value.shape());
    OpContext ctx{rt, value.device().index, 0};
    ops::copy_to_device(ctx, buf, t.values.data());
    state[static_cast<size_t>(i)].push_back({key, std::move(buf), 0});
  }
  optimizer.load_state(std::move(state), ck.optimizer_steps);
}

}  // namespace furnace
