// furnace-viz live feed: the hand-over point between the training thread and the UI thread.
// The training thread writes trace events and progress into a lock-protected ring (each write
// holds the lock for a copy of one small struct); the UI thread pulls everything new once a frame
// and never waits on training. When the UI falls behind by more than the ring, the oldest events
// are dropped and counted. The run's process (furnace::ProcessRecord, published once at its first
// device use) is handed over beside the ring, never dropped. Not here: interpreting the events
// (model.h) or running training (runner.h).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "furnace/trace.h"     // defines: TraceEvent, ProcessRecord
#include "furnace/train.h"     // defines: Progress
#include "snapshot.h"          // defines: RunStatus

namespace furnace::viz {

// Per-device memory counters as the latest alloc/free events left them, with the highest values
// since the last pull (so a short peak inside a step still shows in the history).
struct MemoryNow {
  bool seen = false;
  int64_t allocated = 0, reserved = 0;
  int64_t max_allocated = 0, max_reserved = 0;  // since the last pull
};

// Everything that happened since the previous pull.
struct FeedDelta {
  std::vector<TraceEvent> events;  // in emission order
  std::vector<Progress> progress;  // one per optimizer step
  std::vector<MemoryNow> memory;   // indexed by device
  uint64_t dropped = 0;            // events lost to ring overflow since the previous pull
  RunStatus status;
  bool new_run = false;            // a run started since the previous pull: reset the view
  std::string backend;             // filled when new_run
  // The run's process, in the pull after its first device use (before that use's events).
  std::optional<ProcessRecord> process;
  void clear();
};

class LiveFeed {
 public:
  explicit LiveFeed(size_t capacity = size_t{1} << 16);

  // ---- the training side ---------------------------------------------------------------
  // A new run starts: the UI will reset its view on the next pull.
  void begin_run(const std::string& backend, const RunStatus& status);
  void set_status(const RunStatus& status);
  void on_event(const TraceEvent& e);
  void on_process(const ProcessRecord& p);  // the run's first device use fixed its process
  void on_progress(const Progress& p);

  // ---- the UI side -------------------------------------------------------------------------
  // Moves everything new into `out` (its vectors keep their capacity from frame to frame).
  void pull(FeedDelta& out);

  size_t capacity() const { return ring_.size(); }

 private:
  mutable std::mutex mu_;
  std::vector<TraceEvent> ring_;
  uint64_t written_ = 0, read_ = 0;
  std::vector<Progress> progress_;
  std::vector<MemoryNow> memory_;
  RunStatus status_;
  bool new_run_ = false;
  std::string backend_;
  std::optional<ProcessRecord> process_;
};

}  // namespace furnace::viz
