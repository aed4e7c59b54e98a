// furnace-viz step flow model: one training step as a list of stages read from the step's phase
// events (a stage = consecutive phases with one name, on one or several devices), what kind of
// motion each stage gets in the Step flow panel, and the playback state machine (play, pause,
// step one phase, jump, speed). Pure logic: no ImGui, testable on its own.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "snapshot.h"  // defines: StepPhases, PhaseSpan

namespace furnace::viz {

enum class StageKind {
  host_to_device,  // h2d: the batch goes to the device
  scatter,         // the batch split into chunks, one per device
  replicate,       // parameters broadcast from device_ids[0]
  forward,
  gather,          // outputs flow to output_device
  gather_backward, // the output's gradient split and sent back to each replica
  loss,
  backward,
  reduce,          // gradients flow into device_ids[0] and are summed there
  all_reduce,      // DDP: one bucket's ring all-reduce across the ranks, during backward
  optimizer,
  scaler,          // GradScaler: unscale, the inf/NaN check, step or skip, update
  other,
};
StageKind stage_kind(std::string_view phase_name);
// The step's shape: one device, DataParallel (one process: scatter, replicate, gather, reduce) or
// DistributedDataParallel (a process per GPU, each with its own model: buckets all-reduced).
enum class FlowMode { single, dp, ddp };
FlowMode flow_mode(const std::string& parallel);  // RunStatus::parallel
// A phase's name as the Step flow shows it: the runtime's ("forward") in English, in Chinese a
// translation ("前向"); a name it does not know stays as it is.
const char* stage_name(const char* phase_name, bool zh);
// Every phase name a step can show (the runtime's phases, and DDP's all_reduce): what --stage takes.
std::vector<std::string> stage_names();
// One line saying what happens in a stage of that kind under `mode`.
const char* stage_caption(StageKind k, FlowMode mode, bool zh = false);

struct Stage {
  const char* name = "";
  StageKind kind = StageKind::other;
  std::vector<PhaseSpan> spans;  // one per device (in emission order)
  double dur = 0;                // the longest span: devices run a stage side by side
  uint64_t bytes = 0;            // copy bytes inside the stage, all devices
  int repeat = 1;                // the n-th time this name appears in the step (accumulation)
  // DDP's bucket all-reduces run on the communication stream while backward goes on: their time
  // is inside the backward stage's, not added to the step's.
  bool overlapped = false;
};

// Groups a step's phases into stages in the order the runtime emitted them. With DDP's
// all-reduces in the step, one all_reduce stage per bucket follows the backward stage (its
// spans: each rank's all-reduce of that bucket, copy_bytes its bytes).
std::vector<Stage> build_stages(const StepPhases& step);
// The time from the end of `previous` (its last phase on any device) to the end of `step`: the
// modelled step time `furnace train` reports. With several devices it is less than the stages
// added up: a device waits inside a stage for another (replicate waits for device_ids[0]'s
// optimizer), and the next step's first copies overlap this one's optimizer. 0 when `previous`
// is not the step before.
double step_period(const StepPhases& previous, const StepPhases& step);
// The newest of `steps` that is a training step (a phase outside any step, such as the wait for
// data under --loading, comes as a StepPhases of step -1); null when there is none.
const StepPhases* newest_step(const std::vector<StepPhases>& steps);
// Whether the Step flow may start on `newest`: not on a run's first step while more are coming
// (the first step pays the caching allocator's cudaMallocs and is slower than every later one).
bool worth_showing_first(const StepPhases& newest, bool run_going);
// device_ids[0] / output_device as the trace shows it: where the loss was computed, else the
// lowest device of the step.
int hub_device(const StepPhases& step);
// The devices that appear in the step, ascending.
std::vector<int> step_devices(const StepPhases& step);

// Playback: quick transitions with pauses between them.
struct StepFlowPlayer {
  static constexpr float kTransition = 0.35f;  // seconds at speed 1
  static constexpr float kHold = 0.65f;

  int stage = 0;
  float t = 0;           // seconds into the current stage (transition, then hold)
  bool playing = true;
  bool once = false;     // playing one stage only (Step), then pause
  float speed = 1.0f;
  bool follow = true;    // at the end of a step, move on to the newest step
  int64_t step = -1;     // the step shown

  // Advances by `dt` seconds; returns true when the last stage ended (the caller picks the next
  // step and calls restart()).
  bool advance(float dt, int stage_count);
  void restart(int64_t new_step) { step = new_step; stage = 0; t = 0; }
  void step_phase(int stage_count);  // the next stage's transition, then pause
  void jump(int to_stage);           // the given stage, from its start
  // 0..1 progress of the current transition, eased (fast in, slow out).
  float transition() const;
};

}  // namespace furnace::viz
