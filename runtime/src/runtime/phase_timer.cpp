// PhaseTimer: spans of the devices' clocks, emitted as phase events (furnace/phase_timer.h).
#include "furnace/phase_timer.h"

#include "furnace/error.h"  // defines: FURNACE_ASSERT

namespace furnace {

PhaseTimer::PhaseTimer(Runtime& rt, std::vector<int> devices)
    : rt_(rt),
      devices_(std::move(devices)),
      clock0_(devices_.size()),
      busy0_(devices_.size()),
      busy_(devices_.size()) {}

void PhaseTimer::begin() {
  FURNACE_ASSERT(!open_) << "PhaseTimer::begin inside an open span";
  open_ = true;
  for (size_t k = 0; k < devices_.size(); ++k) {
    clock0_[k] = rt_.backend().device_time(devices_[k]);
    busy0_[k] = rt_.backend().device_busy_time(devices_[k]);
  }
}

const std::vector<double>& PhaseTimer::end(const char* name, int64_t step) {
  FURNACE_ASSERT(open_) << "PhaseTimer::end without begin";
  open_ = false;
  for (size_t k = 0; k < devices_.size(); ++k) {
    const int d = devices_[k];
    const double clock = rt_.backend().device_time(d);
    busy_[k] = rt_.backend().device_busy_time(d) - busy0_[k];
    if (clock <= clock0_[k] || !rt_.trace().active()) continue;  // this device took no part
    TraceEvent e;
    e.kind = EventKind::phase;
    e.name = name;
    e.device = d;
    e.start_s = clock0_[k];
    e.dur_s = clock - clock0_[k];
    e.step = step;
    rt_.trace().emit(e);
  }
  return busy_;
}

}  // namespace furnace
