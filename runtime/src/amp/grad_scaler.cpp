// GradScaler: torch.amp.GradScaler's state machine (torch/amp/grad_scaler.py, the
// _amp_update_scale_ kernel in AmpKernels.cu). Messages are PyTorch's, word for word.
#include <cmath>
#include <unordered_set>

#include "furnace/amp.h"
#include "furnace/error.h"
#include "furnace/topology.h"

namespace furnace {

GradScaler::GradScaler(GradScalerOptions options) : opt_(options) {
  if (opt_.enabled) {
    FURNACE_CHECK(opt_.growth_factor > 1.0) << "The growth factor must be > 1.0.";
    FURNACE_CHECK(opt_.backoff_factor < 1.0) << "The backoff factor must be < 1.0.";
    FURNACE_CHECK(opt_.growth_interval >= 1) << "The growth interval must be a positive integer.";
  }
  scale_ = static_cast<float>(opt_.init_scale);
}

float GradScaler::loss_scale() const { return opt_.enabled ? scale_ : 1.0f; }
double GradScaler::get_scale() const { return opt_.enabled ? static_cast<double>(scale_) : 1.0; }

void GradScaler::unscale_(OpContext& ctx, Optimizer& optimizer) {
  if (!opt_.enabled) return;
  OptimizerState& st = per_optimizer_[&optimizer];
  st.rt = &ctx.rt;
  FURNACE_CHECK(st.stage != Stage::unscaled)
      << "unscale_() has already been called on this optimizer since the last update().";
  FURNACE_CHECK(st.stage != Stage::stepped) << "unscale_() is being called after step().";
  // inv_scale = 1/scale computed in float64, then stored as float32 (grad_scaler.py).
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  for (const Parameter& p : optimizer.parameters()) {
    if (!p.grad->defined()) continue;
    const int device = p.grad->device().index;
    auto [it, fresh] = st.found_inf_per_device.try_emplace(device);
    OpContext dev_ctx{ctx.rt, device, ctx.stream};
    if (fresh) {
      it->second = Tensor::empty(ctx.rt, Device::cuda(device), {1});
      ops::zero(dev_ctx, it->second);
    }
    ops::non_finite_check_and_unscale(dev_ctx, *p.grad, inv_scale, it->second);
  }
  st.stage = Stage::unscaled;
}

bool GradScaler::step(OpContext& ctx, Optimizer& optimizer) {
  last_skipped_ = false;
  if (!opt_.enabled) {
    optimizer.step(ctx);
    return true;
  }
  OptimizerState& st = per_optimizer_[&optimizer];
  FURNACE_CHECK(st.stage != Stage::stepped) << "step() has already been called since the last update().";
  if (st.stage == Stage::ready) unscale_(ctx, optimizer);
  FURNACE_CHECK(!st.found_inf_per_device.empty()) << "No inf checks were recorded for this optimizer.";
  // Every per-device flag is read with .item(): the host waits for each device here.
  float found = 0;
  for (auto& [device, flag] : st.found_inf_per_device) {
    OpContext dev_ctx{ctx.rt, device, ctx.stream};
    float v = 0;
    ops::copy_to_host(dev_ctx, &v, flag);
    found += v;
  }
  last_skipped_ = found != 0.0f;
  if (!last_skipped_) optimizer.step(ctx);
  st.stage = Stage::stepped;
  return !last_skipped_;
}

void GradScaler::update() {
  if (!opt_.enabled) return;
  // All found_inf flags, of every optimizer and device, summed (on the host here; PyTorch sums on
  // the scale's device, which gives the same number).
  float found = 0;
  bool any = false;
  for (auto& [opt, st] : per_optimizer_)
    for (auto& [device, flag] : st.found_inf_per_device) {
      any = true;
      if (st.rt->backend().host_accessible()) {
        found += *flag.data<float>();  // the simulator's device memory is host memory
      } else {
        OpContext dev_ctx{*st.rt, device, 0};
        float v = 0;
        ops::copy_to_host(dev_ctx, &v, flag);  // a 4-byte copy that waits for the device
        found += v;
      }
    }
  FURNACE_CHECK(any) << "No inf checks were recorded prior to update.";
  if (found != 0.0f) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * opt_.backoff_factor);
    growth_tracker_ = 0;
  } else {
    const int64_t t = growth_tracker_ + 1;
    if (t == opt_.growth_interval) {
      const float candidate = static_cast<float>(static_cast<double>(scale_) * opt_.growth_factor);
      if (std::isfinite(candidate)) scale_ = candidate;  // never grows to infinity
      growth_tracker_ = 0;
    } else {
      growth_tracker_ = t;
    }
  }
  per_optimizer_.clear();  // every optimizer back to READY
}

void GradScaler::update(double new_scale) {
  if (!opt_.enabled) return;
  scale_ = static_cast<float>(new_scale);
  per_optimizer_.clear();
}

std::map<std::string, double> GradScaler::state_dict() const {
  if (!opt_.enabled) return {};
  return {{"scale", get_scale()},
          {"growth_factor", opt_.growth_factor},
          {"backoff_factor", opt_.backoff_factor},
          {"growth_interval", static_cast<double>(opt_.growth_interval)},
          {"_growth_tracker", static_cast<double>(growth_tracker_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  FURNACE_CHECK(!state.empty()) << "The source state dict is empty, possibly because it was saved "
                                   "from a disabled instance of GradScaler.";
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    FURNACE_CHECK(state.count(key)) << "GradScaler state dict is missing '" << key << "'";
  scale_ = static_cast<float>(state.at("scale"));
  opt_.growth_factor = state.at("growth_factor");
  opt_.backoff_factor = state.at("backoff_factor");
  opt_.growth_interval = static_cast<int64_t>(state.at("growth_interval"));
  growth_tracker_ = static_cast<int64_t>(state.at("_growth_tracker"));
}

std::vector<ScalerStep> replay_scaler(int64_t steps, const std::vector<int64_t>& overflow_at,
                                      const GradScalerOptions& options) {
  FURNACE_CHECK(steps >= 1) << "--steps must be at least 1 (got " << steps << ")";
  // Each step is a real scaler step on the simulator and a line of output: 10^8 of them took
  // minutes and gigabytes. A million shows every doubling a float32 scale can make many times over.
  constexpr int64_t kMaxSteps = 1000000;
  FURNACE_CHECK(steps <= kMaxSteps) << "--steps " << steps << ": at most " << kMaxSteps << " steps are replayed";
  for (int64_t s : overflow_at)
    FURNACE_CHECK(s >= 1 && s <= steps) << "--overflow-at: step " << s << " is outside 1.." << steps;
  const std::unordered_set<int64_t> overflow(overflow_at.begin(), overflow_at.end());

  TraceBus bus;
  Runtime rt(make_sim_backend(load_topology("laptop-4060"), &bus), bus);
  OpContext ctx{rt, 0, 0};
  Tensor weight = Tensor::empty(rt, Device::cuda(0), {4});
  Tensor grad;
  ops::zero(ctx, weight);
  SGD optimizer({{"weight", &weight, &grad}}, 0.01f);
  GradScaler scaler(options);

  std::vector<ScalerStep> out;
  for (int64_t s = 1; s <= steps; ++s) {
    ScalerStep rec;
    rec.step = s;
    rec.scale = scaler.get_scale();
    // backward of scaler.scale(loss): every gradient carries the scale; an overflow makes one inf.
    grad = Tensor::empty(rt, Device::cuda(0), {4});
    std::vector<float> g(4, 1e-3f * scaler.loss_scale());
    if (overflow.count(s)) g[1] = INFINITY;
    ops::copy_to_device(ctx, grad, g.data());
    rec.skipped = !scaler.step(ctx, optimizer);
    scaler.update();
    rec.growth_tracker = scaler.growth_tracker();
    rec.next_scale = scaler.get_scale();
    out.push_back(rec);
  }
  return out;
}

}  // namespace furnace
