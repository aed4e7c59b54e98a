// furnace-viz controller: what the app loop does once a frame besides drawing. It owns the live
// feed, the training runner, the snapshot builder and the simulated process whose environment
// (CUDA_VISIBLE_DEVICES) the Devices panel edits; it pulls the feed into the snapshot and carries
// out the panels' requests (restart, stop, a fresh process, open a trace file). No GLFW or GL:
// the headless tests drive it exactly as furnace-viz does.
#pragma once

#include <memory>

#include "app_state.h"        // defines: AppState
#include "furnace/process.h"  // defines: Process, Environment
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
  const Process* process() const { return process_.get(); }

 private:
  void new_process(AppState& app);     // a fresh process, CUDA not initialised yet
  bool start_training(AppState& app);  // initialises CUDA in the process and starts the run
  void refresh_visibility(const AppState& app);
  void update_lessons(AppState& app);
  // Puts a lesson step's scenario into the Controls and the environment, and asks for the run
  // (or, for the devices action, a fresh process) that shows it.
  void set_up_step(AppState& app, const lesson::Step& step);

  LiveFeed feed_;
  SnapshotBuilder builder_;
  FeedDelta delta_;
  std::unique_ptr<Process> process_;
  Environment env_;  // the environment last written into process_
  EnvState shown_env_;  // what the snapshot's visibility was computed from
  bool shown_initialised_ = false, shown_valid_ = false;
  int next_pid_ = 4242;
  LessonDriver lessons_;
  std::unique_ptr<Runner> runner_;  // last: its thread stops before the feed goes away
};

}  // namespace furnace::viz
