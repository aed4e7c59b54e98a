// parallel/timeline: the spans of a DataParallel step on every device it uses (a PhaseTimer, which
// puts them in the trace), summed per phase for the per-device breakdown of modelled time.
// Not here: what the phases are made of (data_parallel.cpp, the training run).
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
    : timer_(rt, std::move(devices)), busy_(timer_.devices().size()) {
  for (auto& b : busy_) b.fill(0.0);
}

void DpTimeline::begin() { timer_.begin(); }

void DpTimeline::end(DpPhase phase, const char* trace_name) {
  const std::vector<double>& busy = timer_.end(trace_name, step_);
  for (size_t k = 0; k < busy.size(); ++k) busy_[k][static_cast<size_t>(phase)] += busy[k];
}

}  // namespace furnace
