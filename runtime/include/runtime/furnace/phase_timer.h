// furnace/phase_timer.h: the phases of a training step (h2d, forward, loss, backward, optimizer;
// DataParallel's scatter, replicate, gather, reduce) as spans of the devices' clocks. One timer for
// one device and for DataParallel's several: between begin() and end(), each device whose clock
// moved gets one phase event in the trace, and its busy time in the span is returned.
// Not here: what the phases are made of (the training run, data_parallel.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "furnace/runtime.h"  // defines: Runtime

namespace furnace {

class PhaseTimer {
 public:
  PhaseTimer(Runtime& rt, std::vector<int> devices);
  // Snapshots every device's clock and busy time. Spans do not nest.
  void begin();
  // Emits a phase event named `name` (a string literal) for `step` on every device whose clock
  // moved since begin(), and returns the seconds each device was busy in the span, in devices()
  // order (modelled; 0 where the backend models nothing).
  const std::vector<double>& end(const char* name, int64_t step);
  const std::vector<int>& devices() const { return devices_; }

 private:
  Runtime& rt_;
  std::vector<int> devices_;
  std::vector<double> clock0_, busy0_, busy_;
  bool open_ = false;
};

}  // namespace furnace
