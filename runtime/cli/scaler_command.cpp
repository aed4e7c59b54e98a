// `furnace scaler`: GradScaler's loss-scale sequence, step by step, with overflows injected at
// chosen steps: the instrument for the mixed-precision lesson.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "furnace/amp.h"
#include "furnace/error.h"

namespace furnace::cli {
namespace {

struct ScalerOptions {
  int64_t steps = 20;
  std::vector<int64_t> overflow_at;
  GradScalerOptions scaler;
  bool json = false;
};

void run_scaler(const ScalerOptions& o) {
  check_init_scale(o.scaler.init_scale);
  const std::vector<ScalerStep> steps = replay_scaler(o.steps, o.overflow_at, o.scaler);
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const ScalerStep& s : steps)
      out.push_back({{"step", s.step}, {"scale", s.scale}, {"growth_tracker", s.growth_tracker},
                     {"skipped", s.skipped}, {"next_scale", s.next_scale}});
    std::printf("%s\n", nlohmann::json{{"steps", out}}.dump().c_str());
    return;
  }
  std::printf("GradScaler(init_scale=%g, growth_factor=%g, backoff_factor=%g, growth_interval=%lld)\n\n",
              o.scaler.init_scale, o.scaler.growth_factor, o.scaler.backoff_factor,
              static_cast<long long>(o.scaler.growth_interval));
  std::printf("  %5s  %14s  %-22s  %14s  %s\n", "step", "scale", "optimizer.step()", "growth_tracker",
              "scale after update()");
  int64_t skipped = 0;
  for (const ScalerStep& s : steps) {
    skipped += s.skipped;
    const char* what = s.skipped ? "SKIPPED (inf/NaN grad)" : "taken";
    std::printf("  %5lld  %14g  %-22s  %14lld  %g%s\n", static_cast<long long>(s.step), s.scale,
                what, static_cast<long long>(s.growth_tracker), s.next_scale,
                s.next_scale < s.scale ? "  (backoff)" : s.next_scale > s.scale ? "  (growth)" : "");
  }
  // The rule in this run's factors ("halves" and "double" are PyTorch's defaults only).
  if (o.scaler.backoff_factor == 0.5 && o.scaler.growth_factor == 2.0)
    std::printf("\n%lld of %lld steps skipped. An overflow halves the scale and restarts the count; "
                "%lld clean steps in a row double it.\n",
                static_cast<long long>(skipped), static_cast<long long>(steps.size()),
                static_cast<long long>(o.scaler.growth_interval));
  else
    std::printf("\n%lld of %lld steps skipped. An overflow multiplies the scale by %g (backoff_factor) and "
                "restarts the count; %lld clean steps in a row multiply it by %g (growth_factor).\n",
                static_cast<long long>(skipped), static_cast<long long>(steps.size()), o.scaler.backoff_factor,
                static_cast<long long>(o.scaler.growth_interval), o.scaler.growth_factor);
}

}  // namespace

void add_scaler_command(CLI::App& app) {
  auto opts = std::make_shared<ScalerOptions>();
  CLI::App* sub = app.add_subcommand(
      "scaler", "replay GradScaler's loss scale over N steps with overflows at chosen steps");
  sub->add_option("--steps", opts->steps, "optimizer steps to replay")->capture_default_str();
  sub->add_option("--overflow-at", opts->overflow_at,
                  "1-based steps whose gradients overflow (comma-separated)")
      ->delimiter(',');
  sub->add_option("--init-scale", opts->scaler.init_scale, "GradScaler init_scale")->capture_default_str();
  sub->add_option("--growth-factor", opts->scaler.growth_factor, "GradScaler growth_factor")->capture_default_str();
  sub->add_option("--backoff-factor", opts->scaler.backoff_factor, "GradScaler backoff_factor")->capture_default_str();
  sub->add_option("--growth-interval", opts->scaler.growth_interval, "GradScaler growth_interval")->capture_default_str();
  sub->add_flag("--json", opts->json,
                "print one JSON line: {\"steps\":[{\"step\",\"scale\",\"growth_tracker\",\"skipped\",\"next_scale\"}]}");
  sub->callback([opts] { run_scaler(*opts); });
}

}  // namespace furnace::cli
