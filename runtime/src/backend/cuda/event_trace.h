// backend/cuda/event_trace: the cuda backend's trace events, stamped with CUDA events. While a
// trace is recorded, every kernel and copy is bracketed by two events on its stream; once the end
// event has completed, the pair becomes a TraceEvent whose times are measured from an origin event
// placed on the host clock (seconds since the backend started, which also stamps the allocator's
// host-side events). The first origin is recorded when the device is first used; as
// cudaEventElapsedTime answers in float milliseconds (a microsecond's steps 30 s after the origin,
// 0.25 ms after an hour), a completed event more than a second after it becomes the next origin
// for the spans begun from then on. Nothing is recorded, and nothing waits, while nobody listens.
// Not here: what the spans contain (cuda_ops.cu, cuda_backend.cu).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "furnace/backend.h"  // defines: KernelCost
#include "furnace/trace.h"

namespace furnace::cuda {

class EventTrace {
 public:
  EventTrace(TraceBus* trace, int devices);
  ~EventTrace();  // waits for every open span, emits it, destroys the events
  EventTrace(const EventTrace&) = delete;
  EventTrace& operator=(const EventTrace&) = delete;

  bool active() const { return trace_ != nullptr && trace_->active(); }
  double host_now() const;  // seconds since construction
  // Records `device`'s origin (device current, nothing queued on `stream` yet).
  void start_device(int device, cudaStream_t stream);

  // A span: begin() records its start on `stream` (device current) and returns its id, or -1 while
  // nobody listens; end() records its end. `wants_cost`: the ops layer will report the kernel's
  // flops and bytes (annotate), which the event carries.
  int64_t begin(int device, cudaStream_t stream);
  void end(int64_t id, cudaStream_t stream, EventKind kind, const char* name, int stream_index,
           uint64_t bytes, bool wants_cost);
  // The cost Backend::account_kernel reports for the latest open span named `name` on `device`.
  void annotate(int device, const char* name, const KernelCost& cost);
  // Measured device time of `stream` now (records an event and waits for it); 0 while inactive.
  double device_now(int device, cudaStream_t stream);
  // Emits every span whose end has completed (wait: waits for all of them first); `device` >= 0:
  // that device's spans only.
  void flush(bool wait, int device = -1);

 private:
  // An event that has completed, and its time on the host clock. Destroys the event with the
  // last span measured from it.
  struct Origin {
    cudaEvent_t event = nullptr;
    double host_s = 0;
    Origin(cudaEvent_t e, double t) : event(e), host_s(t) {}
    ~Origin() { cudaEventDestroy(event); }
    Origin(const Origin&) = delete;
    Origin& operator=(const Origin&) = delete;
  };
  struct Span {
    std::shared_ptr<const Origin> origin;  // the device's origin when the span began
    int device = 0, stream = 0;
    EventKind kind = EventKind::kernel;
    const char* name = "";
    cudaEvent_t start = nullptr, stop = nullptr;
    uint64_t bytes = 0;
    double flops = 0;
    bool ended = false, costed = true;
  };
  cudaEvent_t take_event(int device);  // caller holds mu_; device current
  // Caller holds mu_; both events complete. True when `s.start` became the device's origin (it is
  // then the origin's, not the pool's).
  bool emit_locked(const Span& s);
  void flush_locked(bool wait, int device = -1);
  // `event` (complete, `ms` after the device's origin) becomes the origin when that is more than a
  // second: true when it did (the event is then the origin's). Caller holds mu_.
  bool advance_origin_locked(int device, cudaEvent_t event, float ms);

  TraceBus* trace_;
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::vector<std::shared_ptr<const Origin>> origin_;  // [device], null until first use
  std::vector<std::vector<cudaEvent_t>> free_events_;  // [device]
  std::map<int64_t, Span> open_;                     // by id, oldest first
  int64_t next_id_ = 0;
};

// One span for the launches in a scope (nothing while nobody listens). Device current throughout.
class ScopedSpan {
 public:
  ScopedSpan(EventTrace& events, int device, cudaStream_t stream, int stream_index, const char* name,
             EventKind kind = EventKind::kernel, uint64_t bytes = 0, bool wants_cost = true)
      : events_(events), stream_(stream), stream_index_(stream_index), name_(name), kind_(kind),
        bytes_(bytes), wants_cost_(wants_cost), id_(events.begin(device, stream)) {}
  ~ScopedSpan() {
    try {
      events_.end(id_, stream_, kind_, name_, stream_index_, bytes_, wants_cost_);
    } catch (...) {
      // Timing is best effort; the launch's own error, if any, was already thrown.
    }
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  EventTrace& events_;
  cudaStream_t stream_;
  int stream_index_;
  const char* name_;
  EventKind kind_;
  uint64_t bytes_;
  bool wants_cost_;
  int64_t id_;
};

}  // namespace furnace::cuda
