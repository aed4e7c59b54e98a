// furnace-viz model: turns what the LiveFeed hands over each frame into the Snapshot the panels
// draw (memory bars and their sampled history, decimated training curves, bounded timeline
// tracks, the phases of recent steps with the copies and kernels that fell inside each phase).
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

  // Starts a fresh view of a run on `topology` (every GPU visible, cuda:N = GPU N).
  void reset(const Topology& topology, const std::string& backend);
  // Applies one frame's delta; `now_s` is the UI clock in seconds.
  void ingest(const FeedDelta& delta, double now_s);
  // cuda:N -> physical GPU index (from the process's CUDA_VISIBLE_DEVICES), taking effect at the
  // next reset() (the next run); without one, reset() uses the identity.
  void set_device_map(std::vector<int> logical_to_physical);
  // Single pieces, for tests and for replaying a trace.
  void add_event(const TraceEvent& e);
  void add_progress(const Progress& p);

  const Snapshot& snapshot() const { return snap_; }
  Snapshot& snapshot() { return snap_; }

 private:
  void add_phase(const TraceEvent& e);
  void finish_step();
  DeviceView* device(int ordinal);  // the physical GPU behind cuda:`ordinal`; null if none

  struct Work {
    int device;
    double start;
    uint64_t bytes;
    bool copy;
  };
  Snapshot snap_;
  std::vector<int> physical_of_;  // indexed by cuda ordinal
  std::vector<int> next_map_;     // set_device_map(), for the next reset()
  StepPhases pending_;
  std::vector<Work> work_;  // copies and kernels since the last finished step
  std::vector<MemoryNow> interval_;  // peaks since the last memory sample
  double next_sample_s_ = 0;
  double loss_sum_ = 0, accuracy_sum_ = 0;
};

}  // namespace furnace::viz
