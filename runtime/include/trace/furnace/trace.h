// furnace/trace.h: the TraceBus. Every layer reports what it does as typed events stamped with the
// modelled GPU clock (sim) or measured time (cuda); subscribers (the Chrome trace writer, the
// visualizer's ring, statistics) read them. With no subscriber, emitting costs one branch.
// Beside the events, once per run, the bus carries the run's process (ProcessRecord): the machine
// and the visibility its first device use fixed. The Chrome trace writer does not subscribe to it.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "furnace/process.h"     // defines: Environment
#include "furnace/topology.h"    // defines: Topology
#include "furnace/visibility.h"  // defines: Visibility

namespace furnace {

// Whether an event of this name is a collective (all_reduce, broadcast, barrier): what runs on a
// process group's communication stream, which the trace and the Timeline name "comm".
inline bool is_collective_name(std::string_view name) {
  return name == "all_reduce" || name == "broadcast" || name == "barrier";
}

enum class EventKind : uint8_t {
  kernel,          // an op on a device stream (complete event)
  copy,            // h2d / d2h / d2d / peer copy (complete event)
  alloc,           // caching allocator handed out a block (allocated/reserved after it)
  free,            // a block went back to the cache
  segment_alloc,   // the allocator took a new segment from the device (cudaMalloc)
  segment_free,    // a segment went back to the device (empty_cache, OOM retry)
  phase,           // a training phase on a device (forward, backward, optimizer, scatter, ...)
  step,            // one optimizer step finished: `value` is the loss
  oom,             // an out-of-memory error was raised
};

const char* event_kind_name(EventKind k);

struct TraceEvent {
  EventKind kind = EventKind::kernel;
  const char* name = "";  // "linear_forward", "h2d", ...: a string with static storage
  int device = -1;      // -1: host
  int stream = 0;
  double start_s = 0;   // modelled (sim) or measured (cuda) device time
  double dur_s = 0;
  uint64_t bytes = 0;
  double flops = 0;
  int64_t allocated = 0;  // memory_allocated after an alloc/free event
  int64_t reserved = 0;   // memory_reserved after an alloc/free event
  int64_t step = -1;
  double value = 0;
};

// The process a run works in, published once when its first device use (CUDA's initialisation)
// fixes what it sees: the machine as the run loaded it and the logical -> physical map read from
// the environment then. The visualizer draws this process, not one of its own.
struct ProcessRecord {
  Topology topology;        // every physical GPU (PCI bus order) and its links
  Environment environment;  // CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER as the run was started with
  Visibility visibility;    // frozen: devices[k] is cuda:k and the physical GPU behind it
};

class TraceBus {
 public:
  using Subscriber = std::function<void(const TraceEvent&)>;
  using ProcessSubscriber = std::function<void(const ProcessRecord&)>;

  int subscribe(Subscriber fn);
  int subscribe_process(ProcessSubscriber fn);
  void unsubscribe(int id);  // either kind
  bool active() const { return !subscribers_.empty(); }
  void emit(const TraceEvent& e) const {
    if (!subscribers_.empty()) dispatch(e);
  }
  void publish(const ProcessRecord& p) const;

  // The device clock, set by the backend; events without a time of their own use it.
  void set_clock(std::function<double(int device)> clock) { clock_ = std::move(clock); }
  double now(int device) const { return clock_ ? clock_(device) : 0.0; }

 private:
  void dispatch(const TraceEvent& e) const;
  std::vector<std::pair<int, Subscriber>> subscribers_;
  std::vector<std::pair<int, ProcessSubscriber>> process_subscribers_;
  mutable std::mutex dispatch_mutex_;  // DataParallel workers emit from several threads
  std::function<double(int)> clock_;
  int next_id_ = 1;
};

// Collects events and writes them as a Chrome trace (JSON object format, opens in Perfetto and
// chrome://tracing): one process per device, one thread per stream, complete events for kernels
// and copies, counters for allocated/reserved memory.
class ChromeTraceWriter {
 public:
  explicit ChromeTraceWriter(TraceBus& bus);
  ~ChromeTraceWriter();
  ChromeTraceWriter(const ChromeTraceWriter&) = delete;
  ChromeTraceWriter& operator=(const ChromeTraceWriter&) = delete;

  // names[d] follows "cuda:d" in device d's process name; an empty or missing name leaves "cuda:d".
  void set_device_names(std::vector<std::string> names) { device_names_ = std::move(names); }
  size_t event_count() const { return events_.size(); }
  std::string to_json() const;
  void write(const std::string& path) const;  // throws furnace::Error when it cannot write

 private:
  TraceBus& bus_;
  int id_;
  std::vector<TraceEvent> events_;
  std::vector<std::string> device_names_;
};

}  // namespace furnace
