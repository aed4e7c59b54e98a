// Scenario validation: every bad value gets one line naming the option.
#include <algorithm>
#include <charconv>  // defines: std::from_chars
#include <cmath>     // defines: std::isfinite
#include <string>

#include "furnace/amp.h"    // defines: check_init_scale
#include "furnace/error.h"
#include "furnace/loading_cost.h"  // defines: loading_cost
#include "furnace/train.h"

namespace furnace {

std::optional<ParallelMode> parse_parallel_mode(const std::string& text) {
  if (text == "none") return ParallelMode::none;
  if (text == "dp") return ParallelMode::dp;
  if (text == "ddp") return ParallelMode::ddp;
  return std::nullopt;
}

std::optional<AmpMode> parse_amp_mode(const std::string& text) {
  if (text == "off") return AmpMode::off;
  if (text == "fp16") return AmpMode::fp16;
  if (text == "bf16") return AmpMode::bf16;
  return std::nullopt;
}

std::optional<LrSchedule> parse_lr_schedule(const std::string& text) {
  if (text == "constant") return LrSchedule::constant;
  if (text == "cosine") return LrSchedule::cosine;
  return std::nullopt;
}

std::optional<OptimizerKind> parse_optimizer_kind(const std::string& text) {
  if (text == "sgd") return OptimizerKind::sgd;
  if (text == "adamw") return OptimizerKind::adamw;
  return std::nullopt;
}

OptimizerKind Scenario::optimizer_kind() const {
  const std::optional<OptimizerKind> m = parse_optimizer_kind(optimizer);
  FURNACE_CHECK(m) << "--optimizer must be sgd or adamw (got '" << optimizer << "')";
  return *m;
}

float Scenario::weight_decay_value() const {
  if (weight_decay) return *weight_decay;
  return optimizer_kind() == OptimizerKind::adamw ? 0.01f : 0.0f;  // torch.optim's defaults
}

ParallelMode Scenario::parallel_mode() const {
  const std::optional<ParallelMode> m = parse_parallel_mode(parallel);
  FURNACE_CHECK(m) << "--parallel must be none, dp or ddp (got '" << parallel << "')";
  return *m;
}

AmpMode Scenario::amp_mode() const {
  const std::optional<AmpMode> m = parse_amp_mode(amp);
  FURNACE_CHECK(m) << "--amp must be off, fp16 or bf16 (got '" << amp << "')";
  return *m;
}

LrSchedule Scenario::lr_schedule_mode() const {
  const std::optional<LrSchedule> m = parse_lr_schedule(lr_schedule);
  FURNACE_CHECK(m) << "--lr-schedule must be constant or cosine (got '" << lr_schedule << "')";
  return *m;
}

void Scenario::validate() const {
  FURNACE_CHECK(epochs >= 1) << "--epochs must be at least 1 (got " << epochs << ")";
  FURNACE_CHECK(batch >= 1) << "--batch must be at least 1 (got " << batch << ")";
  FURNACE_CHECK(lr > 0 && lr < 100) << "--lr must be in (0, 100) (got " << lr << ")";
  FURNACE_CHECK(momentum >= 0 && momentum < 1) << "--momentum must be in [0, 1) (got " << momentum << ")";
  lr_schedule_mode();
  optimizer_kind();
  FURNACE_CHECK(!weight_decay || (*weight_decay >= 0 && *weight_decay < 1))
      << "--weight-decay must be in [0, 1) (got " << *weight_decay << ")";
  FURNACE_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1)
      << "--betas must both be in [0, 1) (got " << beta1 << "," << beta2 << ")";
  FURNACE_CHECK(eps >= 0 && eps < 1) << "--eps must be in [0, 1) (got " << eps << ")";
  FURNACE_CHECK(loading == "off" || loading_cost(loading))
      << "--loading must be off, tensors or torchvision (got '" << loading << "')";
  FURNACE_CHECK(!clip_grad_norm || (*clip_grad_norm > 0 && std::isfinite(*clip_grad_norm)))
      << "--clip-grad-norm must be a positive finite number (got " << *clip_grad_norm << ")";
  const AmpMode amp_kind = amp_mode();
  FURNACE_CHECK(accum >= 1) << "--accum must be at least 1 (got " << accum << ")";
  if (amp_kind == AmpMode::fp16) check_init_scale(scaler.init_scale);
  FURNACE_CHECK(workers >= 0) << "num_workers option should be non-negative; use num_workers=0 to "
                                 "disable multiprocessing. (--workers " << workers << ")";
  FURNACE_CHECK(!hidden.empty()) << "--hidden needs at least one layer width";
  for (int h : hidden)
    FURNACE_CHECK(h >= 1 && h <= (1 << 20)) << "--hidden: layer width " << h << " is out of range [1, 1048576]";
  FURNACE_CHECK(max_steps == -1 || max_steps >= 1) << "--steps must be at least 1 (got " << max_steps << ")";
  FURNACE_CHECK(device >= 0) << "--device must be a non-negative ordinal (got " << device << ")";
  FURNACE_CHECK(parallel_mode() == ParallelMode::dp || (!device_ids && !output_device))
      << (device_ids ? "--device-ids" : "--output-device") << " needs --parallel dp";
  if (parallel_mode() == ParallelMode::ddp) {
    FURNACE_CHECK(nproc == -1 || nproc >= 1) << "--nproc must be at least 1 (got " << nproc << ")";
    FURNACE_CHECK(std::isfinite(bucket_cap_mb) && bucket_cap_mb > 0)
        << "--bucket-cap-mb must be a positive number of megabytes (got " << bucket_cap_mb << ")";
    FURNACE_CHECK(bucket_cap_mb * 1024.0 * 1024.0 >= 1.0 && bucket_cap_mb <= 1.0e12)
        << "--bucket-cap-mb " << bucket_cap_mb << " is not a usable bucket size (1 byte to 1e12 MB)";
    // Whole milliseconds, at most a day (a longer wait is a hang).
    FURNACE_CHECK(std::isfinite(dist_timeout_s) && dist_timeout_s >= 0.001 && dist_timeout_s <= 86400)
        << "--dist-timeout must be between 0.001 and 86400 seconds (got " << dist_timeout_s << ")";
  } else {
    FURNACE_CHECK(nproc == -1) << "--nproc needs --parallel ddp";
  }
}

std::vector<int> parse_int_list(const std::string& text, const std::string& what,
                                const char* noun_and_example, bool allow_empty) {
  std::vector<int> out;
  if (text.empty() && allow_empty) return out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    // Exactly an optional '-' and digits that fit in an int: no spaces, no '+', no "0x".
    int v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    FURNACE_CHECK(!item.empty() && ec == std::errc() && end == item.data() + item.size())
        << what << ": '" << printable(text) << "' is not a comma-separated list of " << noun_and_example;
    out.push_back(v);
    start = comma + 1;
  }
  return out;
}

}  // namespace furnace
