// The "meta" section of a checkpoint: JSON written from a Checkpoint and read back with every
// field checked (type, range, printable text), so a hand-edited or corrupt file gets one line
// naming the field. Floating-point values that may be non-finite (a diverged loss) are written as
// the strings "inf", "-inf" or "nan", which JSON numbers cannot hold.
#include "train/checkpoint_meta.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "furnace/error.h"

namespace furnace {
namespace {

using nlohmann::json;

json real(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

json scenario_json(const Scenario& s) {
  return {{"topology", s.topology},
          {"backend", s.backend},
          {"hidden", s.hidden},
          {"epochs", s.epochs},
          {"batch", s.batch},
          {"lr", real(s.lr)},
          {"momentum", real(s.momentum)},
          {"optimizer", s.optimizer},
          {"weight_decay", s.weight_decay ? real(*s.weight_decay) : json()},
          {"betas", {real(s.beta1), real(s.beta2)}},
          {"eps", real(s.eps)},
          {"clip_grad_norm", s.clip_grad_norm ? real(*s.clip_grad_norm) : json()},
          {"lr_schedule", s.lr_schedule},
          {"seed", s.seed},
          {"data_dir", s.data_dir},
          {"max_steps", s.max_steps},
          {"device", s.device},
          {"evaluate", s.evaluate},
          {"normalize", s.normalize},
          {"parallel", s.parallel},
          {"device_ids", s.device_ids ? json(*s.device_ids) : json()},
          {"output_device", s.output_device ? json(*s.output_device) : json()},
          {"amp", s.amp},
          {"scaler",
           {{"init_scale", real(s.scaler.init_scale)},
            {"growth_factor", real(s.scaler.growth_factor)},
            {"backoff_factor", real(s.scaler.backoff_factor)},
            {"growth_interval", s.scaler.growth_interval}}},
          {"accum", s.accum},
          {"accum_divide", s.accum_divide},
          {"workers", s.workers},
          {"prefetch_factor", s.prefetch_factor},
          {"pin_memory", s.pin_memory},
          {"loading", s.loading},
          {"track_accuracy", s.track_accuracy},
          {"allow_tf32", s.allow_tf32},
          {"nproc", s.nproc},
          {"bucket_cap_mb", real(s.bucket_cap_mb)},
          {"sampler_set_epoch", s.sampler_set_epoch}};
}

// Deeper nesting than a checkpoint ever has is refused before parsing.
bool nesting_within(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// Typed access to the metadata, naming the field in every error.
class Meta {
 public:
  explicit Meta(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    FURNACE_FAIL() << "checkpoint " << origin_ << ": metadata field '" << field << "' " << what;
  }
  const json& at(const json& obj, const std::string& path) const {
    const size_t dot = path.rfind('.');
    const std::string key = dot == std::string::npos ? path : path.substr(dot + 1);
    auto it = obj.find(key);
    if (it == obj.end()) fail(path, "is missing");
    return *it;
  }
  const json& object(const json& obj, const std::string& path) const {
    const json& v = at(obj, path);
    if (!v.is_object()) fail(path, "must be an object");
    return v;
  }
  int64_t integer_value(const json& v, const std::string& path, int64_t lo, int64_t hi) const {
    int64_t x = 0;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail(path, "is out of range");
      x = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      x = v.get<int64_t>();
    } else {
      fail(path, "must be an integer");
    }
    if (x < lo || x > hi)
      fail(path, "is " + std::to_string(x) + ", out of range " + std::to_string(lo) + ".." + std::to_string(hi));
    return x;
  }
  int64_t integer(const json& obj, const std::string& path, int64_t lo = std::numeric_limits<int64_t>::min(),
                  int64_t hi = std::numeric_limits<int64_t>::max()) const {
    return integer_value(at(obj, path), path, lo, hi);
  }
  int int32(const json& obj, const std::string& path, int64_t lo = std::numeric_limits<int>::min(),
            int64_t hi = std::numeric_limits<int>::max()) const {
    return static_cast<int>(integer(obj, path, lo, hi));
  }
  uint64_t u64(const json& obj, const std::string& path, uint64_t hi = std::numeric_limits<uint64_t>::max()) const {
    const json& v = at(obj, path);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      fail(path, "must be a non-negative integer");
    const uint64_t u = v.get<uint64_t>();
    if (u > hi) fail(path, "is out of range 0.." + std::to_string(hi));
    return u;
  }
  double real_value(const json& v, const std::string& path) const {
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (s == "inf") return INFINITY;
      if (s == "-inf") return -INFINITY;
      if (s == "nan") return NAN;
    }
    fail(path, "must be a number (or \"inf\", \"-inf\", \"nan\")");
  }
  double real(const json& obj, const std::string& path) const { return real_value(at(obj, path), path); }
  // A float32 field: a finite double beyond float's range cannot be converted (and is no checkpoint's).
  float real32_value(const json& v, const std::string& path) const {
    const double d = real_value(v, path);
    if (std::isfinite(d) && std::fabs(d) > std::numeric_limits<float>::max()) fail(path, "is out of float32 range");
    return static_cast<float>(d);
  }
  float real32(const json& obj, const std::string& path) const { return real32_value(at(obj, path), path); }
  std::string text(const json& obj, const std::string& path) const {
    const json& v = at(obj, path);
    if (!v.is_string()) fail(path, "must be a string");
    const std::string& s = v.get_ref<const std::string&>();
    if (s.size() > 4096) fail(path, "is longer than 4096 characters");
    for (unsigned char c : s)
      if (c < 0x20 || c == 0x7f) fail(path, "contains a control character");
    return s;
  }
  bool boolean(const json& obj, const std::string& path) const {
    const json& v = at(obj, path);
    if (!v.is_boolean()) fail(path, "must be true or false");
    return v.get<bool>();
  }
  std::vector<int> int_list(const json& v, const std::string& path, size_t max_items) const {
    if (!v.is_array()) fail(path, "must be a list of integers");
    if (v.size() > max_items) fail(path, "has more than " + std::to_string(max_items) + " items");
    std::vector<int> out;
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(static_cast<int>(integer_value(v[i], path + "[" + std::to_string(i) + "]",
                                             std::numeric_limits<int>::min(), std::numeric_limits<int>::max())));
    return out;
  }

 private:
  std::string origin_;
};

Scenario read_scenario(const Meta& m, const json& root) {
  const json& j = m.object(root, "scenario");
  Scenario s;
  s.topology = m.text(j, "scenario.topology");
  s.backend = m.text(j, "scenario.backend");
  s.hidden = m.int_list(m.at(j, "scenario.hidden"), "scenario.hidden", 1024);
  s.epochs = m.int32(j, "scenario.epochs");
  s.batch = m.integer(j, "scenario.batch");
  s.lr = m.real32(j, "scenario.lr");
  s.momentum = m.real32(j, "scenario.momentum");
  // Added with AdamW (checkpoints written before have none of them: SGD, no clipping).
  if (j.contains("optimizer")) {
    s.optimizer = m.text(j, "scenario.optimizer");
    const json& wd = m.at(j, "scenario.weight_decay");
    if (!wd.is_null()) s.weight_decay = m.real32_value(wd, "scenario.weight_decay");
    const json& betas = m.at(j, "scenario.betas");
    if (!betas.is_array() || betas.size() != 2) m.fail("scenario.betas", "must be a list of two numbers");
    s.beta1 = m.real32_value(betas[0], "scenario.betas[0]");
    s.beta2 = m.real32_value(betas[1], "scenario.betas[1]");
    s.eps = m.real32(j, "scenario.eps");
    const json& clip = m.at(j, "scenario.clip_grad_norm");
    if (!clip.is_null()) s.clip_grad_norm = m.real32_value(clip, "scenario.clip_grad_norm");
  }
  s.lr_schedule = m.text(j, "scenario.lr_schedule");
  s.seed = m.u64(j, "scenario.seed");
  s.data_dir = m.text(j, "scenario.data_dir");
  s.max_steps = m.integer(j, "scenario.max_steps");
  s.device = m.int32(j, "scenario.device");
  s.evaluate = m.boolean(j, "scenario.evaluate");
  s.normalize = m.boolean(j, "scenario.normalize");
  s.parallel = m.text(j, "scenario.parallel");
  const json& ids = m.at(j, "scenario.device_ids");
  if (!ids.is_null()) s.device_ids = m.int_list(ids, "scenario.device_ids", 1024);
  const json& out = m.at(j, "scenario.output_device");
  if (!out.is_null())
    s.output_device = static_cast<int>(m.integer_value(out, "scenario.output_device", std::numeric_limits<int>::min(),
                                                 std::numeric_limits<int>::max()));
  s.amp = m.text(j, "scenario.amp");
  const json& sc = m.object(j, "scenario.scaler");
  s.scaler.init_scale = m.real(sc, "scenario.scaler.init_scale");
  s.scaler.growth_factor = m.real(sc, "scenario.scaler.growth_factor");
  s.scaler.backoff_factor = m.real(sc, "scenario.scaler.backoff_factor");
  s.scaler.growth_interval = m.integer(sc, "scenario.scaler.growth_interval");
  s.accum = m.int32(j, "scenario.accum");
  s.accum_divide = m.boolean(j, "scenario.accum_divide");
  s.workers = m.int32(j, "scenario.workers");
  s.prefetch_factor = m.int32(j, "scenario.prefetch_factor");
  s.pin_memory = m.boolean(j, "scenario.pin_memory");
  if (j.contains("loading")) s.loading = m.text(j, "scenario.loading");  // absent before it existed: "off"
  s.track_accuracy = m.boolean(j, "scenario.track_accuracy");
  s.allow_tf32 = m.boolean(j, "scenario.allow_tf32");
  // Added with DDP resume (absent before: the defaults).
  if (j.contains("nproc")) s.nproc = m.int32(j, "scenario.nproc", -1, 1 << 20);
  if (j.contains("bucket_cap_mb")) s.bucket_cap_mb = m.real(j, "scenario.bucket_cap_mb");
  if (j.contains("sampler_set_epoch")) s.sampler_set_epoch = m.boolean(j, "scenario.sampler_set_epoch");
  return s;
}

}  // namespace

// "state.<i>.<key>" -> (i, key), or (-1, "").
std::pair<int64_t, std::string> optimizer_state_name(const std::string& name) {
  const std::string head = "state.";
  if (name.compare(0, head.size(), head) != 0) return {-1, ""};
  const size_t dot = name.find('.', head.size());
  if (dot == std::string::npos || dot + 1 >= name.size()) return {-1, ""};
  const std::string digits = name.substr(head.size(), dot - head.size());
  if (digits.empty() || digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return {-1, ""};
  int64_t i = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return {-1, ""};
    i = i * 10 + (c - '0');
  }
  return {i, name.substr(dot + 1)};
}

std::vector<std::string> optimizer_state_keys(const std::string& type) {
  if (type == "SGD") return {"momentum_buffer"};
  if (type == "AdamW") return {"step", "exp_avg", "exp_avg_sq"};
  return {};
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

std::string checkpoint_meta_json(const Checkpoint& ck) {
  json params = json::array();
  for (size_t i = 0; i < ck.model.size(); ++i) params.push_back(i);
  json scaler = json::object();
  for (const auto& [k, v] : ck.scaler) scaler[k] = real(v);
  json epoch_means = json::array();
  for (float v : ck.tallies.epoch_mean_loss) epoch_means.push_back(real(v));
  const LoaderPosition& l = ck.loader;
  const RunTallies& t = ck.tallies;
  json j = {
      {"format", "furnace checkpoint"},
      {"scenario", scenario_json(ck.scenario)},
      {"step", ck.step},
      {"total_steps", ck.total_steps},
      {"save_every", ck.save_every},
      {"saved_by", ck.saved_by},
      {"optimizer", {{"type", ck.optimizer_type}, {"steps", ck.optimizer_steps}, {"params", params}}},
      {"scaler", scaler},
      {"loader",
       {{"epoch", l.epoch}, {"next_batch", l.next_batch}, {"seed", l.seed}, {"dataset_size", l.dataset_size},
        {"dataset_crc", l.dataset_crc}, {"order_crc", l.order_crc}}},
      {"tallies",
       {{"train_samples", t.train_samples}, {"skipped_steps", t.skipped_steps},
        {"steps_in_epoch", t.steps_in_epoch}, {"epoch_loss_sum", real(t.epoch_loss_sum)},
        {"last_loss", real(t.last_loss)}, {"epoch_mean_loss", epoch_means}}}};
  if (ck.ddp) {
    const DdpCheckpointInfo& d = *ck.ddp;
    j["ddp"] = {{"world", d.world},
                {"rank_batch", d.rank_batch},
                {"sampler",
                 {{"shuffle", d.shuffle}, {"seed", d.seed}, {"drop_last", d.drop_last}, {"set_epoch", d.set_epoch}}},
                {"padded_size", d.padded_size}};
  }
  return j.dump(1);
}

// GradScaler.state_dict()'s values as PyTorch's GradScaler can hold them: the scale a positive
// float32 (1e308 would become inf, and every step would be skipped), the factors on the right side
// of 1, the tracker below the interval.
static void check_scaler_state(const Meta& m, const std::map<std::string, double>& st) {
  const double scale = st.at("scale");
  if (!(scale > 0) || scale > std::numeric_limits<float>::max())
    m.fail("scaler.scale", "must be a positive finite float32 (got " + std::to_string(scale) + ")");
  if (!(st.at("growth_factor") > 1)) m.fail("scaler.growth_factor", "must be > 1.0");
  const double backoff = st.at("backoff_factor");
  if (!(backoff > 0 && backoff < 1)) m.fail("scaler.backoff_factor", "must be in (0, 1)");
  const double interval = st.at("growth_interval");
  if (interval < 1 || interval > std::numeric_limits<int32_t>::max())
    m.fail("scaler.growth_interval", "must be a positive integer");
  if (st.at("_growth_tracker") >= interval)
    m.fail("scaler._growth_tracker", "must be below growth_interval");
}

void parse_checkpoint_meta(const std::string& text, Checkpoint& ck, const std::string& origin) {
  FURNACE_CHECK(nesting_within(text, 16)) << "checkpoint " << origin << ": metadata nests too deeply";
  // nlohmann's parser stops at a NUL byte as at the end of the text: what follows would be ignored.
  const size_t nul = text.find('\0');
  FURNACE_CHECK(nul == std::string::npos)
      << "checkpoint " << origin << ": metadata is not valid JSON: a NUL byte at offset " << nul
      << " (the metadata is " << text.size() << " bytes)";
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    FURNACE_FAIL() << "checkpoint " << origin << ": metadata is not valid JSON: " << printable(std::string_view(e.what()));
  }
  FURNACE_CHECK(root.is_object()) << "checkpoint " << origin << ": metadata is not a JSON object";
  const Meta m(origin);
  if (m.text(root, "format") != "furnace checkpoint") m.fail("format", "is not \"furnace checkpoint\"");

  ck.scenario = read_scenario(m, root);
  try {
    ck.scenario.validate();
  } catch (const Error& e) {
    FURNACE_FAIL() << "checkpoint " << origin << ": its scenario is invalid: " << e.message();
  }
  ck.total_steps = m.integer(root, "total_steps", 0);
  ck.step = m.integer(root, "step", 0, ck.total_steps);
  ck.save_every = m.integer(root, "save_every", 0);
  ck.saved_by = m.text(root, "saved_by");
  if (ck.saved_by != "Sequential" && ck.saved_by != "DataParallel" && ck.saved_by != "DistributedDataParallel")
    m.fail("saved_by", "must be \"Sequential\", \"DataParallel\" or \"DistributedDataParallel\"");
  FURNACE_CHECK(!ck.model.empty()) << "checkpoint " << origin << ": the model's state_dict is empty";

  const json& opt = m.object(root, "optimizer");
  ck.optimizer_type = m.text(opt, "optimizer.type");
  const std::string expected_type = ck.scenario.optimizer_kind() == OptimizerKind::adamw ? "AdamW" : "SGD";
  if (ck.optimizer_type != expected_type)
    m.fail("optimizer.type", "must be \"" + expected_type + "\" (the scenario's optimizer " + ck.scenario.optimizer + ")");
  ck.optimizer_steps = m.integer(opt, "optimizer.steps", 0);
  const json& params = m.at(opt, "optimizer.params");
  if (!params.is_array() || params.size() != ck.model.size())
    m.fail("optimizer.params", "must list the " + std::to_string(ck.model.size()) + " parameters of the model");
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].is_number_integer() || params[i].get<int64_t>() != static_cast<int64_t>(i))
      m.fail("optimizer.params", "must be 0.." + std::to_string(ck.model.size() - 1) + " in order");
  const std::vector<std::string> keys = optimizer_state_keys(ck.optimizer_type);
  std::string key_list;
  for (const std::string& k : keys) key_list += (key_list.empty() ? "" : "|") + k;
  std::map<int64_t, size_t> keys_of;  // parameter -> state entries seen
  for (const StateTensor& t : ck.optimizer_state) {
    const auto [i, key] = optimizer_state_name(t.name);
    FURNACE_CHECK(i >= 0 && i < static_cast<int64_t>(ck.model.size()) &&
                  std::find(keys.begin(), keys.end(), key) != keys.end())
        << "checkpoint " << origin << ": optimizer state '" << t.name
        << "' names no parameter (expected state.<0.." << ck.model.size() - 1 << ">.<" << key_list
        << "> for " << ck.optimizer_type << ")";
    ++keys_of[i];
    const std::vector<int64_t>& want = key == "step" ? std::vector<int64_t>{} : ck.model[static_cast<size_t>(i)].shape;
    FURNACE_CHECK(t.shape == want)
        << "checkpoint " << origin << ": optimizer state '" << t.name << "' has shape "
        << shape_text(t.shape) << ", its parameter " << ck.model[static_cast<size_t>(i)].name
        << " " << shape_text(want);
    // AdamW's step: a float32 count, as PyTorch 1.13 keeps it (exact up to 2^24).
    FURNACE_CHECK(key != "step" || (t.values[0] >= 1 && t.values[0] <= 16777216.0f && t.values[0] == std::floor(t.values[0])))
        << "checkpoint " << origin << ": optimizer state '" << t.name << "' must be a whole number of steps >= 1";
  }
  for (const auto& [i, n] : keys_of)
    FURNACE_CHECK(n == keys.size()) << "checkpoint " << origin << ": parameter " << i << " has " << n
                                    << " of the " << keys.size() << " optimizer state entries of "
                                    << ck.optimizer_type << " (" << key_list << ")";

  const json& scaler = m.object(root, "scaler");
  ck.scaler.clear();
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    if (scaler.contains(key)) ck.scaler[key] = m.real(scaler, std::string("scaler.") + key);
  if (ck.scaler.size() != scaler.size() || (!ck.scaler.empty() && ck.scaler.size() != 5))
    m.fail("scaler", "must be GradScaler.state_dict() (scale, growth_factor, backoff_factor, "
                     "growth_interval, _growth_tracker) or empty");
  for (const auto& [key, v] : ck.scaler) {
    const bool count = key == "growth_interval" || key == "_growth_tracker";
    if (!std::isfinite(v) || (count && (v != std::floor(v) || v < 0 || v > 9007199254740992.0)))
      m.fail("scaler." + key, count ? "must be a non-negative integer" : "must be finite");
  }
  if (!ck.scaler.empty()) check_scaler_state(m, ck.scaler);

  const json& l = m.object(root, "loader");
  ck.loader.epoch = m.integer(l, "loader.epoch", 0, ck.scenario.epochs - 1);
  ck.loader.next_batch = m.integer(l, "loader.next_batch", 0);
  ck.loader.seed = m.u64(l, "loader.seed");
  ck.loader.dataset_size = m.integer(l, "loader.dataset_size", 1);
  ck.loader.dataset_crc = static_cast<uint32_t>(m.u64(l, "loader.dataset_crc", UINT32_MAX));
  ck.loader.order_crc = static_cast<uint32_t>(m.u64(l, "loader.order_crc", UINT32_MAX));

  ck.ddp.reset();
  if (root.contains("ddp")) {
    if (ck.saved_by != "DistributedDataParallel") m.fail("ddp", "belongs to a checkpoint saved by DistributedDataParallel");
    const json& d = m.object(root, "ddp");
    DdpCheckpointInfo info;
    info.world = m.int32(d, "ddp.world", 1, 1 << 20);
    info.rank_batch = m.integer(d, "ddp.rank_batch", 1);
    if (info.rank_batch * info.world != ck.scenario.batch)
      m.fail("ddp.rank_batch", "times ddp.world must be the scenario's batch (" + std::to_string(ck.scenario.batch) + ")");
    const json& so = m.object(d, "ddp.sampler");
    info.shuffle = m.boolean(so, "ddp.sampler.shuffle");
    info.seed = m.u64(so, "ddp.sampler.seed");
    info.drop_last = m.boolean(so, "ddp.sampler.drop_last");
    info.set_epoch = m.boolean(so, "ddp.sampler.set_epoch");
    info.padded_size = m.integer(d, "ddp.padded_size", 0);
    ck.ddp = info;
  }

  const json& t = m.object(root, "tallies");
  ck.tallies.train_samples = m.integer(t, "tallies.train_samples", 0);
  ck.tallies.skipped_steps = m.integer(t, "tallies.skipped_steps", 0, ck.step);
  ck.tallies.steps_in_epoch = m.integer(t, "tallies.steps_in_epoch", 0, ck.step);
  ck.tallies.epoch_loss_sum = m.real(t, "tallies.epoch_loss_sum");
  ck.tallies.last_loss = m.real32(t, "tallies.last_loss");
  const json& means = m.at(t, "tallies.epoch_mean_loss");
  if (!means.is_array() || means.size() != static_cast<size_t>(ck.loader.epoch))
    m.fail("tallies.epoch_mean_loss", "must hold one mean loss per finished epoch (" +
                                          std::to_string(ck.loader.epoch) + ")");
  ck.tallies.epoch_mean_loss.clear();
  for (size_t i = 0; i < means.size(); ++i)
    ck.tallies.epoch_mean_loss.push_back(
        m.real32_value(means[i], "tallies.epoch_mean_loss[" + std::to_string(i) + "]"));
}

}  // namespace furnace
