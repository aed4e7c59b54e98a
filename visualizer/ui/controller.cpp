// Controller: feed -> snapshot, requests -> runner, environment -> process visibility.
#include "controller.h"

#include <algorithm>

#include "furnace/error.h"     // defines: Error, FURNACE_CHECK
#include "furnace/topology.h"  // defines: load_topology
#include "trace_file.h"        // defines: load_chrome_trace

namespace furnace::viz {


Scenario scenario_from_controls(const ControlsState& c) {
  Scenario sc = c.scenario;
  sc.hidden = parse_hidden(c.hidden);
  sc.track_accuracy = true;
  sc.parallel = c.parallel;
  sc.device_ids.reset();
  sc.output_device.reset();
  if (sc.parallel_mode() == ParallelMode::dp) {
    if (!c.device_ids.empty()) {
      sc.device_ids = furnace::parse_int_list(c.device_ids, "device_ids", "integers (e.g. 0,1)");
      if (!c.keep_device) sc.device = std::max(0, sc.device_ids->front());  // model.cuda(device_ids[0]) first
    }
    if (c.output_device >= 0) sc.output_device = c.output_device;
  }
  sc.validate();
  return sc;
}

Environment environment_of(const EnvState& env) {
  Environment e;
  if (env.visible_set) e[kCudaVisibleDevices] = env.visible;
  if (!env.order.empty()) e[kCudaDeviceOrder] = env.order;
  return e;
}

Controller::Controller(AppState& app, bool autostart, Runner::Priority priority)
    : runner_(std::make_unique<Runner>(feed_, priority)) {
  lessons_.load();
  new_process(app);
  if (autostart) start_training(app);
  refresh_visibility(app);
}

Controller::~Controller() { runner_.reset(); }

void Controller::new_process(AppState& app) {
  runner_->stop();
  Topology topology;
  try {
    topology = load_topology(app.controls.scenario.topology);
  } catch (const std::exception& e) {
    app.controls.error = e.what();
  }
  const int generation = builder_.snapshot().run.generation;
  builder_.reset(topology, app.controls.scenario.backend);
  builder_.snapshot().run.generation = generation;
  builder_.snapshot().run.message = "a new process: CUDA is not initialised until training starts";
  env_ = environment_of(app.env);
  process_ = std::make_unique<Process>(next_pid_++, "python train.py", env_, topology.gpus);
  shown_valid_ = false;
}

bool Controller::start_training(AppState& app) {
  Scenario sc;
  try {
    sc = scenario_from_controls(app.controls);
  } catch (const std::exception& e) {
    app.controls.error = e.what();
    return false;
  }
  app.controls.error.clear();
  if (!process_ || process_->initialized()) new_process(app);  // a restart is a new process
  const Visibility frozen = process_->initialize();  // the run's first device use fixes it
  std::vector<int> map;
  for (const VisibleDevice& d : frozen.devices) map.push_back(d.physical_index);
  builder_.set_device_map(std::move(map));  // applies from the run's first event
  RunRequest request;
  request.scenario = sc;
  request.scenario.env = process_->environment();
  request.visible_devices = process_->getenv(kCudaVisibleDevices);
  runner_->set_step_delay(app.controls.step_delay_ms / 1000.0);
  runner_->start(std::move(request));
  return true;
}

void Controller::refresh_visibility(const AppState& app) {
  Snapshot& s = builder_.snapshot();
  const bool initialised = process_ && process_->initialized();
  const bool same_env = app.env.visible_set == shown_env_.visible_set &&
                        app.env.visible == shown_env_.visible && app.env.order == shown_env_.order;
  if (same_env && initialised == shown_initialised_ && shown_valid_) return;  // nothing changed
  const Environment env = environment_of(app.env);
  if (process_) {
    if (env != env_) {  // os.environ changes: always possible, effective only before CUDA init
      for (const char* key : {kCudaVisibleDevices, kCudaDeviceOrder}) {
        auto it = env.find(key);
        if (it == env.end())
          process_->unsetenv(key);
        else
          process_->setenv(key, it->second);
      }
      env_ = env;
    }
    s.visibility = process_->visibility();
    s.visibility_frozen = initialised;
  }
  s.edited_visibility = resolve_visibility(s.topology.gpus, env);
  shown_env_ = app.env;
  shown_initialised_ = initialised;
  shown_valid_ = true;
}

namespace {

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// Whether the live training run shows what the step runs. Only training-like actions have one:
// a run of the default scenario would put unrelated numbers next to an allocation replay
// (memory), GradScaler's rule (scaler) or a story of several processes (machine). And the live
// trainer builds the model on its device and copies each batch there: a step about a model or
// an input left on the CPU, which fails in PyTorch, would train happily on screen. Those steps
// show the fresh process instead.
bool live_run_shows(const lesson::Step& step) {
  const std::string& a = step.action;
  if (a != "train" && a != "forward" && a != "dp-loss-trap" && a != "loader") return false;
  const lesson::StepScenario& s = step.scenario;
  const bool model_on_cpu = s.model_device == "cpu";
  const bool bare_input_on_cpu = s.scenario.parallel_mode() != ParallelMode::dp && s.input_device == "cpu" &&
                                 std::find(s.keys.begin(), s.keys.end(), "input_device") != s.keys.end();
  return !model_on_cpu && !bare_input_on_cpu;
}

}  // namespace

void Controller::set_up_step(AppState& app, const lesson::Step& step) {
  const Scenario& sc = step.scenario.scenario;
  ControlsState& c = app.controls;
  c.scenario = sc;
  if (c.scenario.data_dir.empty()) c.scenario.data_dir = lesson::lesson_data_dir();  // the slice
  // The live run goes on after the step's few optimizer steps: a finished run has freed its
  // tensors, and the panels would show an empty GPU where the step talks about what it holds
  // "after two steps". The checks come from the step's own run.
  c.scenario.max_steps = -1;
  c.scenario.epochs = std::max(c.scenario.epochs, Scenario{}.epochs);
  c.hidden = join_ints(sc.hidden);
  // The dp-loss-trap action is DataParallel by definition (the 3, 3, 3, 1 split of its batch).
  c.parallel = step.action == "dp-loss-trap" ? "dp" : sc.parallel;
  c.device_ids = sc.device_ids ? join_ints(*sc.device_ids) : "";
  c.output_device = sc.output_device.value_or(-1);
  const std::vector<std::string>& keys = step.scenario.keys;
  c.keep_device = std::find(keys.begin(), keys.end(), "device") != keys.end();
  const auto visible = sc.env.find(kCudaVisibleDevices);
  app.env.visible_set = visible != sc.env.end();
  app.env.visible = app.env.visible_set ? visible->second : "";
  // os.environ[...] = ... before the first device use is what the process starts with.
  if (step.scenario.set_visible_before_init) {
    app.env.visible_set = true;
    app.env.visible = *step.scenario.set_visible_before_init;
  }
  const auto order = sc.env.find(kCudaDeviceOrder);
  app.env.order = order != sc.env.end() ? order->second : "FASTEST_FIRST";
  if (auto panel = parse_panel(step.panel)) app.is_open(*panel) = true;
  // Every step is a new `python train.py`, started with the step's environment. The devices
  // lessons are about what a process sees before and at its first device use: the fresh process
  // shows that; the others show their run live.
  // Set, not added to: opening a lesson at step N sets up its first step in the same frame.
  app.new_process_requested = true;
  app.visible_after_first_use = step.scenario.set_visible_after_init;
  app.restart_requested = live_run_shows(step);
}

void Controller::update_lessons(AppState& app) {
  LessonState& ls = app.lesson;
  if (ls.open_request) {
    lessons_.open(*ls.open_request);
    ls.open_request.reset();
    if (const lesson::Step* step = lessons_.view().current_step()) {
      app.is_open(PanelId::lesson) = true;
      set_up_step(app, *step);
    }
  }
  if (ls.step_request) {
    lessons_.go_to(*ls.step_request);
    ls.step_request.reset();
    if (const lesson::Step* step = lessons_.view().current_step()) set_up_step(app, *step);
  }
  if (ls.run_request) {
    ls.run_request = false;
    lessons_.run_current();
  }
  lessons_.poll();
}

void Controller::update(AppState& app, double now_s) {
  update_lessons(app);
  if (app.new_process_requested) {
    app.new_process_requested = false;
    new_process(app);
    if (app.visible_after_first_use) {  // the first device use, then the edit that comes too late
      process_->initialize();
      app.env.visible_set = true;
      app.env.visible = *app.visible_after_first_use;
    }
  }
  app.visible_after_first_use.reset();
  if (app.restart_requested) {
    app.restart_requested = false;
    start_training(app);
  }
  if (app.stop_requested) {
    app.stop_requested = false;
    runner_->stop();
  }
  if (app.open_trace) {
    try {
      builder_.snapshot().file_timeline = load_chrome_trace(*app.open_trace);
      app.trace_error.clear();
    } catch (const std::exception& e) {
      app.trace_error = e.what();
    }
    app.open_trace.reset();
  }
  if (app.close_trace_requested) {
    app.close_trace_requested = false;
    builder_.snapshot().file_timeline = TimelineData{};
  }
  runner_->set_step_delay(app.controls.step_delay_ms / 1000.0);

  feed_.pull(delta_);
  if (process_ && !process_->initialized() && !delta_.new_run)
    builder_.snapshot().time_s = now_s;  // a process that has not used CUDA has no device events
  else
    builder_.ingest(delta_, now_s);
  if (delta_.new_run) shown_valid_ = false;  // the builder's reset cleared the visibility
  refresh_visibility(app);
  builder_.snapshot().lesson = lessons_.view();  // after ingest: a new run resets the snapshot
}

}  // namespace furnace::viz
