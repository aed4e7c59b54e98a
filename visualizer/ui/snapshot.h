// furnace-viz snapshot: the plain data every panel reads each frame (devices and their memory,
// the training curves, the timeline tracks, the phases of recent steps, the run's status). It is
// built on the UI thread from the runtime's events (SnapshotBuilder, model.h) or by hand in tests;
// panels only read it. Not here: threads, locks, ImGui, GLFW or GL.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lesson_driver.h"  // defines: LessonView
#include "furnace/imbalance.h"  // defines: Imbalance
#include "furnace/topology.h"  // defines: Topology, GpuSpec, LinkSpec
#include "furnace/trace.h"     // defines: EventKind
#include "furnace/visibility.h"  // defines: Visibility

namespace furnace::viz {

// A fixed-size ring of samples, oldest first when read through at(); no allocation after reset().
class History {
 public:
  explicit History(int capacity = 0) { reset(capacity); }
  void reset(int capacity) {
    values_.assign(static_cast<size_t>(capacity > 0 ? capacity : 1), 0.0f);
    head_ = 0;
    size_ = 0;
  }
  void push(float v) {
    values_[static_cast<size_t>(head_)] = v;
    head_ = (head_ + 1) % capacity();
    if (size_ < capacity()) ++size_;
  }
  int size() const { return size_; }
  int capacity() const { return static_cast<int>(values_.size()); }
  float at(int i) const {  // 0 = oldest kept sample
    const int start = size_ < capacity() ? 0 : head_;
    return values_[static_cast<size_t>((start + i) % capacity())];
  }
  float back() const { return size_ ? at(size_ - 1) : 0.0f; }
  float max() const {
    float m = 0;
    for (int i = 0; i < size_; ++i) m = at(i) > m ? at(i) : m;
    return m;
  }

 private:
  std::vector<float> values_;
  int head_ = 0, size_ = 0;
};

// One GPU as the UI shows it: what the topology says plus the live counters from the runtime.
struct DeviceView {
  int index = 0;              // the ordinal in the trace (cuda:N)
  std::string name;
  uint64_t capacity = 0;      // total memory (nvidia-smi)
  uint64_t context = 0;       // the CUDA context a process pays once it touches the device
  bool used = false;          // this process has touched the device (its context exists)
  int64_t allocated = 0;      // torch.cuda.memory_allocated
  int64_t reserved = 0;       // torch.cuda.memory_reserved
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  History allocated_mib{240}; // sampled a few times a second, the peak of each interval
  History reserved_mib{240};
};

// The training curves: one point per optimizer step until `kMaxPoints`, then every other point
// is dropped and the stride doubles, so a long run still fits (and draws) in bounded space.
struct TrainingSeries {
  static constexpr int kMaxPoints = 2048;
  std::vector<float> loss;      // (points)
  std::vector<float> accuracy;  // (points) training-batch accuracy; empty when not reported
  int64_t stride = 1;           // optimizer steps per point
  int64_t pending = 0;          // steps seen since the last point
  float last_loss = 0;
  double last_accuracy = -1;
  double samples_per_s = 0;
  int epoch = 0, epochs = 0;
  int64_t step_in_epoch = 0, steps_per_epoch = 0;
  int64_t global_step = 0, total_steps = 0;
  double eta_s = 0;
  // Mixed precision and accumulation (shown as "off" until the runtime reports them).
  double loss_scale = 0;        // 0: no scaler
  int64_t skipped_steps = 0;
  History loss_scale_log2{512};
  int micro_step = 0, accumulation = 1;
  std::vector<std::string> warnings;  // the run's UserWarnings (DataParallel's imbalance check)
  std::optional<parallel::Imbalance> imbalance;  // what that check found, to say which GPUs it means

  void clear() { *this = TrainingSeries{}; }
};

// One event on a timeline track.
struct TimelineEvent {
  double start = 0, dur = 0;  // seconds, modelled (sim) or measured (cuda) device time
  const char* name = "";      // static storage (live) or TimelineData::names (file)
  EventKind kind = EventKind::kernel;
  uint64_t bytes = 0;
  double flops = 0;
  int64_t step = -1;
};

// One row of the timeline: a device's stream, its training phases, or the host.
struct TimelineTrack {
  static constexpr int kPhases = -1;  // `stream` of the phases track
  int device = -1;
  int stream = 0;
  std::string label;                  // "cuda:0 stream 0", "cuda:0 phases"
  std::vector<TimelineEvent> events;  // sorted by start
};

struct TimelineData {
  std::string source = "live";        // "live", or the trace file's path
  std::vector<TimelineTrack> tracks;  // sorted by (device, phases first, stream)
  double t_min = 0, t_max = 0;
  // Storage for names read from a file: stable addresses, shared by copies of this struct.
  std::shared_ptr<std::deque<std::string>> names = std::make_shared<std::deque<std::string>>();
  size_t max_events_per_track = 60000;

  TimelineTrack& track(int device, int stream);  // finds or inserts, keeping the order
  // Appends in time order; trims the oldest quarter of a track that passes the limit.
  void append(int device, int stream, const TimelineEvent& e);
  size_t event_count() const;
  void clear() { *this = TimelineData{}; }
};

// One training phase on one device, with the traffic and work that fell inside it.
struct PhaseSpan {
  const char* name = "";
  int device = 0;
  double start = 0, dur = 0;
  uint64_t copy_bytes = 0;  // bytes of the copies on this device during the phase
  int kernels = 0;          // kernels on this device during the phase
};

// A collective on a device's communication stream (DDP's bucket all-reduces), or the time its
// compute stream waited for them at the end of backward (`bytes` 0).
struct CommSpan {
  int device = 0;
  double start = 0, dur = 0;
  uint64_t bytes = 0;
};

// The phases of one optimizer step, as the trace carried them.
struct StepPhases {
  int64_t step = -1;  // 0-based step index from the phase events
  std::vector<PhaseSpan> spans;
  float loss = 0;
  // DistributedDataParallel: each rank's bucket all-reduces during its backward (in launch order
  // per device) and the compute stream's wait for them (exposed communication).
  std::vector<CommSpan> all_reduces;
  std::vector<CommSpan> comm_waits;
};

struct RunStatus {
  enum class State { idle, loading, running, finished, stopped, failed };
  State state = State::idle;
  std::string message;           // the error, or a one-line summary
  std::string scenario;          // "MLP 784-512-512-10, batch 256, ... on dgx-h100 (sim)"
  std::string scenario_zh;       // the same in Chinese
  bool cuda_initialised = false; // the process has used a device: CUDA_VISIBLE_DEVICES is frozen
  std::string visible_devices;   // the CUDA_VISIBLE_DEVICES value the run started with
  int accumulation = 1;          // micro-batches per optimizer step (Scenario::accum)
  std::string amp = "off";       // autocast's dtype: "off", "fp16" or "bf16" (Scenario::amp)
  // The parallel mode (Scenario::parallel: "none", "dp", "ddp") and what DDP's bucket layout is
  // computed from: the MLP's hidden widths and bucket_cap_mb.
  std::string parallel = "none";
  std::vector<int> hidden;
  double bucket_cap_mb = 25;
  // A lesson step's run: it stops after the step's own steps and holds there (tensors kept, as a
  // script paused after its loop) so the panels show the state the step's checks read.
  bool held = false;
  std::string lesson_step;       // the lesson step whose scenario this run is; empty: none
  int generation = 0;            // counts restarts
};

const char* run_state_name(RunStatus::State s);

struct Snapshot {
  Topology topology;
  std::string backend = "sim";
  RunStatus run;
  std::vector<DeviceView> devices;
  TrainingSeries training;
  TimelineData timeline;
  std::vector<StepPhases> steps;  // the last few complete steps, oldest first
  TimelineData file_timeline;     // a trace file opened in the Timeline panel (no tracks: none)
  // CUDA_VISIBLE_DEVICES as the Devices panel shows it: what this process sees (frozen at its
  // first device use) and what the edited value would give a process started now.
  Visibility visibility;
  Visibility edited_visibility;
  bool visibility_frozen = false;
  // `topology`, `visibility` and the cuda:N -> GPU map are the run's own, as its first device use
  // published them (furnace::ProcessRecord); false: the Controller's preview of a process that has
  // not used a device.
  bool process_from_run = false;
  uint64_t events_seen = 0;
  uint64_t events_dropped = 0;    // the feed's ring overflowed before the UI read it
  double time_s = 0;              // UI clock, seconds since start (animations, sampling)
  LessonView lesson;              // the lessons and the open one's results (LessonDriver)
};

}  // namespace furnace::viz
