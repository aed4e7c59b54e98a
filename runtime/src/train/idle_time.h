// train/idle_time: a device's modelled wait per step, step time less busy time. Where a device
// never waits the subtraction leaves rounding (1e-19 s), which is no wait: reported as 0.
#pragma once

namespace furnace {

inline double idle_seconds(double step_s, double busy_s) {
  const double idle = step_s - busy_s;
  return idle > 1e-12 ? idle : 0.0;
}

}  // namespace furnace
