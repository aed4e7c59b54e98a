// furnace-viz model: turns what the LiveFeed hands over each frame into the Snapshot the panels
// draw (memory bars and their sampled history, decimated training curves, bounded timeline
// tracks, the phases of recent steps with the copies and kernels that fell inside each phase).
// The machine and the cuda:N -> GPU map come from the run's own process (its ProcessRecord).
// Runs on the UI thread only. Not here: drawing (panels), the training thread (runner.h).
#pragma once

#include <vector>

#include "live_feed.h"  // defines: FeedDelta, MemoryNow
#include "snapshot.h"   // defines: Snapshot

namespace furnace::viz {

class SnapshotBuilder {
 public:
  static constexpr double kSampleInterval = 0.1;  // seconds of UI time between memory samples
  static constexpr size_t kStepsKept = 8;

  // Starts a fresh view of a process on `topology` that has not used a device (every GPU visible,
  // cuda:N = GPU N, until the run publishes its process). A trace file the Timeline opened stays.
  void reset(const Topology& topology, const std::string& backend);
  // Applies one frame's delta (a new run, its process, events, progress, memory); `now_s` is the
  // UI clock in seconds.
  void ingest(const FeedDelta& delta, double now_s);
  // The run's process: its machine, its frozen visibility and the cuda:N -> GPU map that places
  // every later event.
  void set_process(const ProcessRecord& p);
  // Single pieces, for tests and for replaying a trace.
  void add_event(const TraceEvent& e);
  void add_progress(const Progress& p);

  const Snapshot& snapshot() const { return snap_; }
  Snapshot& snapshot() { return snap_; }

 private:
  void add_phase(const TraceEvent& e);
  void finish_step();
  void set_devices(const Topology& topology);  // one DeviceView per GPU, counters at zero
  DeviceView* device(int ordinal);  // the physical GPU behind cuda:`ordinal`; null if none

  struct Work {
    int device;
    int stream;
    double start, dur;
    uint64_t bytes;
    bool copy;
    bool all_reduce;  // a collective on the communication stream (DDP's buckets)
  };
  bool ddp() const { return snap_.run.parallel == "ddp"; }
  // DDP: the backward phase's all-reduces and the compute stream's wait for them, on `device`.
  void add_comm(int device, double start, double end);
  Snapshot snap_;
  std::vector<int> physical_of_;  // indexed by cuda ordinal
  StepPhases pending_;
  std::vector<Work> work_;  // copies and kernels since the last finished step
  std::vector<MemoryNow> interval_;  // peaks since the last memory sample
  double next_sample_s_ = 0;
  double loss_sum_ = 0, accuracy_sum_ = 0;
};

}  // namespace furnace::viz
