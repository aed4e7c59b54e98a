// EventTrace: spans bracketed by CUDA events, emitted once they have completed.
#include "backend/cuda/event_trace.h"

#include <string_view>

#include "backend/cuda/cuda_check.h"

namespace furnace::cuda {

namespace {
// How far from its origin a span may be measured before a later event becomes the origin: float
// milliseconds keep about 0.06 us at one second.
constexpr float kOriginSpanMs = 1000.0f;
}  // namespace

EventTrace::EventTrace(TraceBus* trace, int devices)
    : trace_(trace), origin_(static_cast<size_t>(devices)), free_events_(static_cast<size_t>(devices)) {}

EventTrace::~EventTrace() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    flush_locked(/*wait=*/true);
  } catch (...) {
    // A destructor must not throw; the spans are lost with the backend.
  }
  for (auto& [id, s] : open_) {
    if (s.start) cudaEventDestroy(s.start);
    if (s.stop) cudaEventDestroy(s.stop);
  }
  for (auto& events : free_events_)
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  // The origins go with the last shared_ptr (origin_, and open_'s spans).
}

double EventTrace::host_now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void EventTrace::start_device(int device, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t d = static_cast<size_t>(device);
  if (origin_.at(d)) return;
  cudaEvent_t e = nullptr;
  FURNACE_CUDA_CHECK(cudaEventCreate(&e));
  FURNACE_CUDA_CHECK(cudaEventRecord(e, stream));
  FURNACE_CUDA_CHECK(cudaEventSynchronize(e));  // the stream is empty: this is "now" on the host
  origin_[d] = std::make_shared<const Origin>(e, host_now());
}

bool EventTrace::advance_origin_locked(int device, cudaEvent_t event, float ms) {
  std::shared_ptr<const Origin>& current = origin_.at(static_cast<size_t>(device));
  if (ms <= kOriginSpanMs) return false;
  // Every span begun from now on is recorded after `event` completed, so its times from it are
  // positive; the spans already open keep the origin they began with.
  current = std::make_shared<const Origin>(event, current->host_s + static_cast<double>(ms) * 1e-3);
  return true;
}

cudaEvent_t EventTrace::take_event(int device) {
  std::vector<cudaEvent_t>& pool = free_events_.at(static_cast<size_t>(device));
  if (!pool.empty()) {
    cudaEvent_t e = pool.back();
    pool.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  FURNACE_CUDA_CHECK(cudaEventCreate(&e));  // timing enabled: spans measure elapsed time
  return e;
}

int64_t EventTrace::begin(int device, cudaStream_t stream) {
  if (!active()) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  // Keep the event pool small: emit what has completed, and wait only if spans pile up (their
  // cost never came).
  if (open_.size() > 512) flush_locked(/*wait=*/open_.size() > 4096);
  Span s;
  s.device = device;
  s.origin = origin_.at(static_cast<size_t>(device));
  if (!s.origin) return -1;  // the device was never started: nothing to measure from
  s.start = take_event(device);
  FURNACE_CUDA_CHECK(cudaEventRecord(s.start, stream));
  const int64_t id = next_id_++;
  open_.emplace(id, s);
  return id;
}

void EventTrace::end(int64_t id, cudaStream_t stream, EventKind kind, const char* name,
                     int stream_index, uint64_t bytes, bool wants_cost) {
  if (id < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(id);
  if (it == open_.end()) return;
  Span& s = it->second;
  s.stop = take_event(s.device);
  FURNACE_CUDA_CHECK(cudaEventRecord(s.stop, stream));
  s.kind = kind;
  s.name = name;
  s.stream = stream_index;
  s.bytes = bytes;
  s.ended = true;
  s.costed = !wants_cost;
}

void EventTrace::annotate(int device, const char* name, const KernelCost& cost) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = open_.rbegin(); it != open_.rend(); ++it) {
    Span& s = it->second;
    if (s.device != device || s.costed || !s.ended || std::string_view(s.name) != name) continue;
    s.flops = cost.flops;
    s.bytes = static_cast<uint64_t>(cost.bytes);
    s.costed = true;
    return;
  }
}

bool EventTrace::emit_locked(const Span& s) {
  float from_origin_ms = 0, duration_ms = 0;
  FURNACE_CUDA_CHECK(cudaEventElapsedTime(&from_origin_ms, s.origin->event, s.start));
  FURNACE_CUDA_CHECK(cudaEventElapsedTime(&duration_ms, s.start, s.stop));
  if (trace_ && trace_->active()) {  // a subscriber may throw: the span then stays open, unchanged
    TraceEvent e;
    e.kind = s.kind;
    e.name = s.name;
    e.device = s.device;
    e.stream = s.stream;
    e.start_s = s.origin->host_s + from_origin_ms * 1e-3;
    e.dur_s = duration_ms * 1e-3;
    e.bytes = s.bytes;
    e.flops = s.flops;
    trace_->emit(e);
  }
  // A span measured from the device's current origin may become the next one; one measured from
  // an older origin never moves it back.
  return s.origin == origin_.at(static_cast<size_t>(s.device)) && advance_origin_locked(s.device, s.start, from_origin_ms);
}

void EventTrace::flush_locked(bool wait, int device) {
  for (auto it = open_.begin(); it != open_.end();) {
    Span& s = it->second;
    // Still being launched (another thread), or another device's than the one asked for: keep it.
    if (!s.ended || (device >= 0 && s.device != device)) {
      ++it;
      continue;
    }
    if (wait) {
      FURNACE_CUDA_CHECK(cudaEventSynchronize(s.stop));
    } else {
      if (!FURNACE_CUDA_QUERY(cudaEventQuery(s.stop))) {
        ++it;
        continue;
      }
    }
    // A span waits for its cost only while its kernel may still be reported; once flushed with
    // wait (synchronize, destruction) it goes out as it is.
    if (!s.costed && !wait) {
      ++it;
      continue;
    }
    if (!emit_locked(s)) free_events_.at(static_cast<size_t>(s.device)).push_back(s.start);
    free_events_.at(static_cast<size_t>(s.device)).push_back(s.stop);
    it = open_.erase(it);
  }
}

void EventTrace::flush(bool wait, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  flush_locked(wait, device);
}

double EventTrace::device_now(int device, cudaStream_t stream) {
  if (!active()) return 0.0;
  std::lock_guard<std::mutex> lock(mu_);
  const size_t d = static_cast<size_t>(device);
  if (!origin_.at(d)) return 0.0;
  cudaEvent_t e = take_event(device);
  FURNACE_CUDA_CHECK(cudaEventRecord(e, stream));
  FURNACE_CUDA_CHECK(cudaEventSynchronize(e));
  float ms = 0;
  FURNACE_CUDA_CHECK(cudaEventElapsedTime(&ms, origin_[d]->event, e));
  const double now = origin_[d]->host_s + ms * 1e-3;
  if (!advance_origin_locked(device, e, ms)) free_events_[d].push_back(e);
  flush_locked(/*wait=*/false);
  return now;
}

}  // namespace furnace::cuda
