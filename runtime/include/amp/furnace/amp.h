// furnace/amp.h: mixed precision. GradScaler reproduces torch.amp.GradScaler's state machine
// exactly (shared/reference/semantics.md, section 3): scale the loss, unscale the gradients with one
// found_inf flag per device, skip the optimizer step when any device found inf/NaN, and update the
// scale (backoff on overflow, growth after `growth_interval` clean steps, never to infinity).
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "furnace/error.h"  // defines: FURNACE_CHECK
#include "furnace/nn.h"

namespace furnace {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2**16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

// Throws furnace::Error (one line) unless `init_scale` is a positive finite number that a float32
// holds: PyTorch takes any, but with 0, a negative, a non-finite one or one past float32 (the
// scale lives in a float32 tensor) every fp16 step is skipped, and a checkpoint cannot be resumed.
// (Inline: the Scenario's own checks use it where nothing else of the amp layer is linked.)
inline void check_init_scale(double init_scale) {
  FURNACE_CHECK(init_scale > 0 && std::isfinite(init_scale))
      << "--init-scale must be a positive finite number (got " << init_scale << ")";
  const float as_float = static_cast<float>(init_scale);
  FURNACE_CHECK(as_float > 0 && std::isfinite(as_float))
      << "--init-scale " << init_scale << " is not a positive finite float32 (GradScaler keeps the scale in one; "
      << "the largest is 3.4e38)";
}

class GradScaler {
 public:
  // Throws furnace::Error "The growth factor must be > 1.0." / "The backoff factor must be < 1.0."
  explicit GradScaler(GradScalerOptions options = {});

  bool is_enabled() const { return opt_.enabled; }
  // scaler.scale(loss): the factor the loss (and so every gradient) is multiplied by. With our
  // explicit backward, it is passed as dloss to the loss's backward. 1 when disabled.
  float loss_scale() const;
  // get_scale(): the current scale (init_scale before first use; 1.0 when disabled).
  double get_scale() const;
  int64_t growth_tracker() const { return growth_tracker_; }

  // unscale_(optimizer): grads *= 1/scale, recording non-finite values per device.
  void unscale_(OpContext& ctx, Optimizer& optimizer);
  // step(optimizer): unscales first if needed; calls optimizer.step() unless any device found
  // inf/NaN. Returns true when the optimizer stepped, false when the step was skipped.
  bool step(OpContext& ctx, Optimizer& optimizer);
  // update(): the scale rule; update(new_scale) sets the scale and leaves the tracker alone.
  void update();
  void update(double new_scale);

  // Whether the last step() found an inf/NaN on any device (for logs and the trace).
  bool last_step_skipped() const { return last_skipped_; }

  // state_dict(): {"scale", "growth_factor", "backoff_factor", "growth_interval",
  // "_growth_tracker"}; empty when disabled.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct OptimizerState {
    Stage stage = Stage::ready;
    std::map<int, Tensor> found_inf_per_device;  // 1-element f32 tensors, one per device
    Runtime* rt = nullptr;                       // where they live (set by unscale_)
  };

  GradScalerOptions opt_;
  float scale_;  // stored as float32, as PyTorch's _scale tensor
  int64_t growth_tracker_ = 0;
  std::map<const Optimizer*, OptimizerState> per_optimizer_;
  bool last_skipped_ = false;
};

// The per-step record of a scale sequence: what `furnace scaler` prints.
struct ScalerStep {
  int64_t step = 0;        // 1-based
  double scale = 0;        // the scale this step's loss was multiplied by
  bool skipped = false;    // the optimizer step was skipped (inf/NaN found)
  int64_t growth_tracker = 0;  // after update()
  double next_scale = 0;   // after update()
};

// Replays `steps` optimizer steps through a real GradScaler on a simulated device, injecting an
// overflow (an inf gradient) at the 1-based steps in `overflow_at`.
std::vector<ScalerStep> replay_scaler(int64_t steps, const std::vector<int64_t>& overflow_at,
                                      const GradScalerOptions& options);

}  // namespace furnace
