// parallel/timeline: the spans of a DataParallel step on every device it uses, for the trace (one
// phase event per device per span) and for the per-device breakdown of modelled time.
// Not here: what the phases are made of (data_parallel.cpp, the trainer).
#include "furnace/error.h"     // defines: FURNACE_ASSERT
#include "furnace/parallel.h"  // defines: DpTimeline, DpPhase

namespace furnace {

const char* dp_phase_name(DpPhase p) {
  switch (p) {
    case DpPhase::scatter: return "scatter";
    case DpPhase::replicate: return "replicate";
    case DpPhase::compute: return "compute";
    case DpPhase::gather: return "gather";
    case DpPhase::reduce: return "reduce";
    case DpPhase::optimizer: return "optimizer";
  }
  return "?";
}

DpTimeline::DpTimeline(Runtime& rt, std::vector<int> devices)
    : rt_(rt),
      devices_(std::move(devices)),
      clock0_(devices_.size()),
      busy0_(devices_.size()),
      busy_(devices_.size()) {
  for (auto& b : busy_) b.fill(0.0);
}

void DpTimeline::begin() {
  FURNACE_ASSERT(!open_) << "DpTimeline::begin inside an open span";
  open_ = true;
  for (size_t k = 0; k < devices_.size(); ++k) {
    clock0_[k] = rt_.backend().device_time(devices_[k]);
    busy0_[k] = rt_.backend().device_busy_time(devices_[k]);
  }
}

void DpTimeline::end(DpPhase phase, const char* trace_name) {
  FURNACE_ASSERT(open_) << "DpTimeline::end without begin";
  open_ = false;
  for (size_t k = 0; k < devices_.size(); ++k) {
    const int d = devices_[k];
    const double clock = rt_.backend().device_time(d);
    busy_[k][static_cast<size_t>(phase)] += rt_.backend().device_busy_time(d) - busy0_[k];
    if (clock <= clock0_[k] || !rt_.trace().active()) continue;  // this device took no part
    TraceEvent e;
    e.kind = EventKind::phase;
    e.name = trace_name;
    e.device = d;
    e.start_s = clock0_[k];
    e.dur_s = clock - clock0_[k];
    e.step = step_;
    rt_.trace().emit(e);
  }
}

}  // namespace furnace
