// PyTorch's load_state_dict key rules and DataParallel's "module." prefix (pitfall 9): which saved
// key loads into which model key, PyTorch's error text for a strict load, and the explanation a
// resumed run prints when Furnace fixed the prefix.
//
// Why a prefix at all: nn.DataParallel(model) is a Module whose only child is the real model,
// registered as `self.module`; state_dict() walks children and joins names with ".", so every key
// becomes "module." + the bare model's key. PyTorch keeps this on purpose (pytorch/pytorch#3805),
// and a strict load of one into the other fails with missing and unexpected keys.
#include <algorithm>
#include <set>

#include "furnace/checkpoint.h"

namespace furnace {
namespace {

const std::string kPrefix = "module.";

bool prefixed(const std::string& k) { return k.compare(0, kPrefix.size(), kPrefix) == 0; }

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string s;
  for (const std::string& k : keys) s += (s.empty() ? "\"" : ", \"") + k + "\"";
  return s;
}

// "a, b, c, ... (12 keys)" for the explanation (the strict error lists them all, as PyTorch does).
std::string short_list(const std::vector<std::string>& keys, size_t show = 4) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < show; ++i) s += (i ? ", " : "") + keys[i];
  if (keys.size() > show) s += ", ...";
  return s + " (" + std::to_string(keys.size()) + " key" + (keys.size() == 1 ? "" : "s") + ")";
}

std::vector<std::string> head(const std::vector<std::string>& keys, size_t n) {
  return std::vector<std::string>(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(std::min(n, keys.size())));
}

}  // namespace

KeyMatch match_state_dict_keys(const std::vector<std::string>& saved, const std::vector<std::string>& model_keys) {
  KeyMatch m;
  const std::set<std::string> saved_set(saved.begin(), saved.end());
  const std::set<std::string> model_set(model_keys.begin(), model_keys.end());
  for (const std::string& k : model_keys)
    if (!saved_set.count(k)) m.missing.push_back(k);
  for (const std::string& k : saved)
    if (!model_set.count(k)) m.unexpected.push_back(k);

  // The rename, when exactly one side wears the prefix on every key.
  auto all = [](const std::vector<std::string>& ks) {
    return !ks.empty() && std::all_of(ks.begin(), ks.end(), prefixed);
  };
  auto none = [](const std::vector<std::string>& ks) { return std::none_of(ks.begin(), ks.end(), prefixed); };
  if (!m.missing.empty() || !m.unexpected.empty()) {
    if (all(saved) && none(model_keys)) m.fix = KeyMatch::Fix::strip_module;
    else if (all(model_keys) && none(saved)) m.fix = KeyMatch::Fix::add_module;
  }
  std::map<std::string, std::string> renamed;  // model-side name -> saved key
  for (const std::string& k : saved) {
    const std::string as_model = m.fix == KeyMatch::Fix::strip_module ? k.substr(kPrefix.size())
                                 : m.fix == KeyMatch::Fix::add_module ? kPrefix + k
                                                                      : k;
    renamed.emplace(as_model, k);
  }
  for (const std::string& k : model_keys) {
    auto it = renamed.find(k);
    if (it == renamed.end()) m.residual_missing.push_back(k);
    else m.source_of[k] = it->second;
  }
  for (const auto& [as_model, k] : renamed)
    if (!model_set.count(as_model)) m.residual_unexpected.push_back(k);
  // renamed is ordered by name: put the leftovers back in the file's order.
  std::vector<std::string> ordered;
  for (const std::string& k : saved)
    if (std::find(m.residual_unexpected.begin(), m.residual_unexpected.end(), k) != m.residual_unexpected.end())
      ordered.push_back(k);
  m.residual_unexpected = ordered;
  m.loadable = m.residual_missing.empty() && m.residual_unexpected.empty();
  return m;
}

std::string load_state_dict_error(const std::string& class_name, const std::vector<std::string>& missing,
                                  const std::vector<std::string>& unexpected,
                                  const std::vector<std::string>& size_errors) {
  // module.py: error_msgs gets the size mismatches while loading; then "Unexpected key(s) ..." and
  // "Missing key(s) ..." are each inserted at the front; joined with "\n\t" after the header.
  std::vector<std::string> msgs;
  if (!missing.empty()) msgs.push_back("Missing key(s) in state_dict: " + quoted_list(missing) + ". ");
  if (!unexpected.empty()) msgs.push_back("Unexpected key(s) in state_dict: " + quoted_list(unexpected) + ". ");
  msgs.insert(msgs.end(), size_errors.begin(), size_errors.end());
  std::string s = "Error(s) in loading state_dict for " + class_name + ":";
  for (const std::string& msg : msgs) s += " " + msg;
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

std::string size_mismatch_error(const std::string& key, const std::vector<int64_t>& saved,
                                const std::vector<int64_t>& current) {
  auto torch_size = [](const std::vector<int64_t>& shape) {
    std::string s = "torch.Size([";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "])";
  };
  return "size mismatch for " + key + ": copying a param with shape " + torch_size(saved) +
         " from checkpoint, the shape in current model is " + torch_size(current) + ".";
}

std::vector<std::string> explain_module_prefix(const KeyMatch& match, const std::vector<std::string>& saved,
                                               const std::vector<std::string>& model_keys,
                                               const std::string& model_class, const std::string& saved_by) {
  if (match.fix == KeyMatch::Fix::none) return {};
  const bool strip = match.fix == KeyMatch::Fix::strip_module;
  // torch.nn exports DataParallel; DistributedDataParallel lives in torch.nn.parallel.
  auto qualified = [](const std::string& cls) {
    return (cls == "DistributedDataParallel" ? "nn.parallel." : "nn.") + cls;
  };
  std::vector<std::string> out;
  out.push_back("state_dict keys: the checkpoint's (saved by " + (strip ? saved_by : std::string("the bare model")) +
                "): " + short_list(saved));
  out.push_back("                 this model's (" + model_class + "): " + short_list(model_keys));
  if (strip)
    out.push_back("  " + qualified(saved_by) + "(model) holds the real model as its child `module`, so its state_dict() "
                  "names every parameter \"module.\" + name; the bare model's names have no prefix");
  else
    out.push_back("  this run wraps the model in " + qualified(model_class) + ", which holds it as its child `module`: its "
                  "state_dict() names are \"module.\" + name, and the checkpoint's have no prefix");
  // The first keys of PyTorch's message; --strict-keys prints the whole of it.
  const size_t n = 2;
  std::string pytorch = load_state_dict_error(model_class, head(match.missing, n), head(match.unexpected, n));
  if (match.missing.size() > n || match.unexpected.size() > n) pytorch += " ...";
  out.push_back("  PyTorch's model.load_state_dict(state_dict) stops here: RuntimeError: " + pytorch);
  if (strip)
    out.push_back("  Furnace strips the prefix and loads (in PyTorch: save model.module.state_dict(), or load "
                  "{k.removeprefix(\"module.\"): v for k, v in state_dict.items()}); --strict-keys stops as PyTorch does");
  else
    out.push_back("  Furnace loads into the wrapped model (in PyTorch: model.module.load_state_dict(state_dict), "
                  "or load before wrapping); --strict-keys stops as PyTorch does");
  return out;
}

}  // namespace furnace
