// The TraceBus: subscribers and dispatch.
#include "furnace/trace.h"

#include <algorithm>

namespace furnace {

const char* event_kind_name(EventKind k) {
  switch (k) {
    case EventKind::kernel: return "kernel";
    case EventKind::copy: return "copy";
    case EventKind::alloc: return "alloc";
    case EventKind::free: return "free";
    case EventKind::segment_alloc: return "segment_alloc";
    case EventKind::segment_free: return "segment_free";
    case EventKind::phase: return "phase";
    case EventKind::step: return "step";
    case EventKind::oom: return "oom";
  }
  return "?";
}

int TraceBus::subscribe(Subscriber fn) {
  subscribers_.emplace_back(next_id_, std::move(fn));
  return next_id_++;
}

int TraceBus::subscribe_process(ProcessSubscriber fn) {
  process_subscribers_.emplace_back(next_id_, std::move(fn));
  return next_id_++;
}

void TraceBus::unsubscribe(int id) {
  std::erase_if(subscribers_, [id](const auto& s) { return s.first == id; });
  std::erase_if(process_subscribers_, [id](const auto& s) { return s.first == id; });
}

void TraceBus::publish(const ProcessRecord& p) const {
  std::lock_guard<std::mutex> lock(dispatch_mutex_);
  for (const auto& [id, fn] : process_subscribers_) fn(p);
}

void TraceBus::dispatch(const TraceEvent& e) const {
  std::lock_guard<std::mutex> lock(dispatch_mutex_);
  for (const auto& [id, fn] : subscribers_) fn(e);
}

}  // namespace furnace
