// furnace-viz panels: each a struct with its own state and one draw_frame(AppState&, const
// Snapshot&) that draws its window contents from the snapshot, and Ui, which lays the windows out
// and calls them. Panels read the snapshot and write only requests into AppState; they never
// touch the runtime, threads, GLFW or GL.
//
// [SECTION] list: DevicesPanel, StepFlowPanel, MemoryPanel, TrainingPanel, TimelinePanel,
// ControlsPanel, LessonPanel, Ui.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <imgui.h>

#include "app_state.h"  // defines: AppState, PanelId
#include "lesson_driver.h"  // defines: StepMemory, LessonView
#include "step_flow.h"   // defines: Stage, StepFlowPlayer
#include "snapshot.h"   // defines: Snapshot

namespace furnace::viz {

// Physical GPUs as boxes with their links, the editable CUDA_VISIBLE_DEVICES, and arrows from
// each logical cuda:N to its physical GPU.
struct DevicesPanel {
  std::string edit_buffer;  // the text field (AppState::env holds the applied value)
  bool synced = false;
  std::vector<float> arrow_x;  // where each cuda:N arrow points now (glides to its GPU)
  void draw_frame(AppState& app, const Snapshot& snap);
};

// One training step, phase by phase, from the trace's phase events: on one device (h2d, forward,
// loss, backward, optimizer), through DataParallel (scatter, replicate, parallel_apply's
// forward, gather, loss, backward, reduce, optimizer) or DistributedDataParallel (every rank's
// h2d, forward, loss, backward, one all_reduce per gradient bucket, optimizer).
struct StepFlowPanel {
  StepFlowPlayer player;
  StepPhases shown;           // a copy: a paused step stays while training moves on
  std::vector<Stage> stages;  // of `shown`
  double period_s = 0;        // step_period from the step before `shown` (0: not known)
  int generation = -1;
  std::string hold_stage;   // show this stage, paused mid-transition, once a step has it
  static constexpr int kHoldTries = 3;  // steps looked at before a missing stage is given up
  int hold_misses = 0;            // steps without it so far
  int64_t hold_missed_step = -1;  // the last of them
  float hold_progress = 0.25f;  // of the transition time: about halfway along the eased path
  void draw_frame(AppState& app, const Snapshot& snap);
  // Picks the step to show (the newest when following) and advances playback by `dt`.
  void update(const Snapshot& snap, float dt);
};

// Per GPU: allocated, reserved, context and capacity, with history. Above them, once the open
// lesson's current step (action "memory" or "machine") has run, that step's own figures.
struct MemoryPanel {
  bool capacity_scale = false;  // false: bars scaled to the busiest GPU; true: to capacity
  void draw_frame(AppState& app, const Snapshot& snap);

 private:
  // The open lesson step's figures, and the results, lesson and step they were read from (held,
  // so that a new result can never reuse the old one's address).
  std::optional<StepMemory> step_memory_;
  std::shared_ptr<const std::map<size_t, lesson::StepOutcome>> step_outcomes_;
  int step_lesson_ = -1, step_index_ = -1;
};

// Loss and accuracy curves, throughput, AMP's loss scale, accumulation.
struct TrainingPanel {
  void draw_frame(AppState& app, const Snapshot& snap);
};

// Per-device tracks of kernels, copies and phases, zoomable; live or from a trace file.
struct TimelinePanel {
  double view_start = 0, view_span = 0;  // seconds of device time across the track width
  bool follow = true;                    // keep the newest events in view (live)
  bool auto_span = true;                 // about three steps wide, until the user zooms
  bool show_file = true;                 // show the opened trace file when there is one
  std::string path;                      // the "open a trace" field
  std::string path_shown_for;            // the opened file whose path the field was given
  const TimelineData* last_data = nullptr;
  std::string last_source;
  void draw_frame(AppState& app, const Snapshot& snap);
};

// The scenario's knobs; a change restarts the scenario.
struct ControlsPanel {
  void draw_frame(AppState& app, const Snapshot& snap);
};

// A guided lesson: its text in English or Chinese, step by step (back, next, jump), the
// prediction question, and the checks of what the text claims, PASS or FAIL, once the step ran.
// Choosing a step sets up its scenario in the live panels; the panel it talks about is outlined.
struct LessonPanel {
  std::string answer;       // the learner's answer to the current step's prediction
  int answered_step = -1;   // the step `answer` was submitted for (-1: none)
  int answered_lesson = -1;
  int shown_text_step = -1;  // the step whose text the learner revealed before running it
  void draw_frame(AppState& app, const Snapshot& snap);
};

struct Ui {
  DevicesPanel devices;
  StepFlowPanel step_flow;
  MemoryPanel memory;
  TrainingPanel training;
  TimelinePanel timeline;
  ControlsPanel controls;
  LessonPanel lesson;
  ImVec2 laid_out_for{0, 0};
  bool laid_out_with_lesson = false;  // display size the window layout was computed for

  // The whole UI for one frame: menu bar, status line, the open panels' windows.
  void draw_frame(AppState& app, const Snapshot& snap);
};

// Small drawing helpers shared by the panels.
std::string human_bytes(double bytes);     // "1.5 GiB", "512 KiB"
std::string human_seconds(double seconds); // "12.3 us", "4.56 ms", "1.20 s"
// A time axis's label at `t`: one unit for the whole axis, chosen by its `largest` value, and the
// decimals its `tick` needs (0.0 ms, 0.5 ms, 1.0 ms rather than 0.0 us, 500.0 us, 1.00 ms).
std::string axis_seconds(double t, double tick, double largest);
std::string short_gpu_name(const std::string& name);  // "NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3"
// The Training panel's note after samples/s: whose wall clock it is, and on the CPU (the
// simulator, backend "sim") which OpenBLAS kernel ran the GEMMs, as `furnace train` says it.
std::string wall_clock_note(const std::string& backend, bool zh);
// A line from `from` to `to` with a filled head of size `head` at `to`.
void draw_arrow(ImDrawList* dl, ImVec2 from, ImVec2 to, ImU32 col, float thickness, float head);

}  // namespace furnace::viz
