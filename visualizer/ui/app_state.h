// furnace-viz application state: plain data shared by the panels and the app loop: which panels
// are open, the scenario being edited in Controls, the process environment edited in Devices,
// and the requests panels make (restart, stop, open a trace) that the Controller carries out
// after the frame. No behaviour here.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "furnace/train.h"  // defines: Scenario

namespace furnace::viz {

enum class PanelId { devices, step_flow, memory, training, timeline, controls, lesson };
inline constexpr int kPanelCount = 7;
const char* panel_name(PanelId id);  // "devices", "flow", ... (the --panel values)
const char* panel_title(PanelId id, bool zh = false); // "Devices 设备###devices", ... (window titles)
std::string panel_display_name(PanelId id, bool zh);   // the title as shown: "Devices 设备", "设备"
// A --panel value ("flow") or a lesson step's `panel` ("step_flow": lesson files name the Step
// flow panel by its key, not "pipeline", which in this field means pipeline parallelism).
std::optional<PanelId> parse_panel(std::string_view name);

struct ControlsState {
  Scenario scenario;                 // what the next (re)start runs
  std::string hidden = "512,512";    // the text being edited
  std::string device_ids;            // DataParallel's device_ids, as typed; empty: all visible
  // dp: the model is built on device_ids[0], unless a lesson step says model.cuda(scenario.device)
  // before wrapping (its device_ids=[2, 3] then fails as PyTorch's constructor does).
  bool keep_device = false;
  std::string parallel = "none";     // "none" | "dp"
  int output_device = -1;            // DataParallel's output_device; -1: device_ids[0]
  float step_delay_ms = 100;         // sleep after each optimizer step (watchable animation)
  // The lesson step these controls were set up for (its run holds after its last step); empty:
  // an ordinary run.
  std::string lesson_step;
  std::string error;                 // why the last edit could not be applied
  // The choices, listed once by the Controller: data/topologies' machines, the built backends.
  std::vector<std::string> topologies, backends;
};

struct EnvState {
  // CUDA_VISIBLE_DEVICES of the simulated process; unset when `visible_set` is false.
  bool visible_set = false;
  std::string visible;
  std::string order = "FASTEST_FIRST";  // CUDA_DEVICE_ORDER
};

// The Lesson panel's choices and requests (the Controller carries them out through LessonDriver).
struct LessonState {
  bool zh = false;                   // the text's language: Chinese, else English
  std::optional<int> open_request;   // open lesson i (its first step); -1: back to the list
  std::optional<int> step_request;   // go to step i: sets up its scenario in the live panels
  bool run_request = false;          // run the current step's action and checks
};

struct AppState {
  // Every panel but the Lesson panel starts open; --lesson or View > Lesson opens that one.
  bool open[kPanelCount] = {true, true, true, true, true, true, false};
  std::optional<PanelId> solo;  // --panel NAME: that panel alone, filling the window
  ControlsState controls;
  EnvState env;
  LessonState lesson;
  float frame_ms = 0;           // the previous frame, for the status line

  // ---- requests, carried out by the Controller after the frame --------------------------
  bool restart_requested = false;      // stop the run and start controls.scenario
  bool stop_requested = false;         // stop the run, keep the process
  bool new_process_requested = false;  // stop, and a fresh process that has not used CUDA yet
  // With new_process_requested, for a lesson step: the fresh process uses a GPU first (CUDA
  // initialises), then sets CUDA_VISIBLE_DEVICES to this, which it can no longer change.
  std::optional<std::string> visible_after_first_use;
  std::optional<std::string> open_trace;  // a Chrome trace to show in the Timeline
  bool close_trace_requested = false;
  std::string trace_error;             // why the last trace file could not be opened

  bool& is_open(PanelId id) { return open[static_cast<int>(id)]; }
};

}  // namespace furnace::viz
