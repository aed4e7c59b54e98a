// furnace-viz controller: what the app loop does once a frame besides drawing. It owns the live
// feed, the training runner and the snapshot builder; it pulls the feed into the snapshot and
// carries out the panels' requests (restart, stop, a fresh process, open a trace file). It keeps
// no process of its own: a run's machine and CUDA_VISIBLE_DEVICES map are the ones the run
// publishes at its first device use; before that the Devices panel shows a preview, what the
// edited environment gives on the edited machine (parsed once per edit). No GLFW or GL: the
// headless tests drive it exactly as furnace-viz does.
#pragma once

#include <memory>
#include <optional>

#include "app_state.h"        // defines: AppState
#include "furnace/process.h"  // defines: Environment
#include "lesson_driver.h"    // defines: LessonDriver
#include "live_feed.h"        // defines: LiveFeed, FeedDelta
#include "model.h"            // defines: SnapshotBuilder
#include "runner.h"           // defines: Runner

namespace furnace::viz {

// A comma-separated list of integers as typed in the Controls panel ("512,512", "0,1,2");
// `what` names the field in the error; throws furnace::Error.
// The hidden-layer text ("512,512") as widths; throws furnace::Error.
inline std::vector<int> parse_hidden(const std::string& text) {
  return furnace::parse_int_list(text, "hidden layers", "integers (e.g. 512,512)");
}
// Applies the Controls' text fields to controls.scenario and validates it; throws furnace::Error.
Scenario scenario_from_controls(const ControlsState& controls);
Environment environment_of(const EnvState& env);

// What a process started now would see: the edited CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER
// against the edited machine. The topology is parsed when its name changes, the visibility
// resolved when the environment or the machine changes; never per frame.
class VisibilityPreview {
 public:
  // Brings the preview up to `topology_name` and `env`; returns true when it changed.
  bool update(const std::string& topology_name, const EnvState& env);
  const Topology& topology() const { return topology_; }
  const Visibility& visibility() const { return visibility_; }
  const std::string& error() const { return error_; }  // why the topology could not be read

 private:
  bool valid_ = false;
  std::string topology_name_;
  Topology topology_;
  std::string error_;
  EnvState env_;
  Visibility visibility_;
};

class Controller {
 public:
  // Starts a process for `app`'s scenario; when `autostart`, training starts at once.
  // `priority`: the training thread's (furnace-viz runs it at Runner::Priority::idle).
  explicit Controller(AppState& app, bool autostart = true,
                      Runner::Priority priority = Runner::Priority::normal);
  ~Controller();

  // Once a frame, before drawing: pull the feed, carry out requests, refresh the visibility.
  void update(AppState& app, double now_s);

  const Snapshot& snapshot() const { return builder_.snapshot(); }
  Snapshot& snapshot() { return builder_.snapshot(); }
  Runner& runner() { return *runner_; }
  LessonDriver& lessons() { return lessons_; }
  const VisibilityPreview& preview() const { return preview_; }

 private:
  void new_process(AppState& app);     // a fresh process, CUDA not initialised yet
  bool start_training(AppState& app);  // a new process running the Controls' scenario
  void refresh_visibility(const AppState& app);
  void update_lessons(AppState& app);
  // Puts a lesson step's scenario into the Controls and the environment, and asks for the run
  // (or, for the devices action, a fresh process) that shows it.
  void set_up_step(AppState& app, const lesson::Step& step);

  LiveFeed feed_;
  SnapshotBuilder builder_;
  FeedDelta delta_;
  VisibilityPreview preview_;
  // Until the run publishes its process, what the snapshot shows the process seeing. nullopt: a
  // fresh process, following the edits. Set: the visibility of the environment a run was started
  // with (not frozen: the run has not used a device yet), or the one a lesson step's process fixed
  // by using a GPU without training (frozen).
  std::optional<Visibility> held_;
  bool held_frozen_ = false;
  bool training_ = false;     // a run was started in this process
  bool shown_valid_ = false;  // the snapshot's visibility is up to date
  LessonDriver lessons_;
  std::unique_ptr<Runner> runner_;  // last: its thread stops before the feed goes away
};

}  // namespace furnace::viz
