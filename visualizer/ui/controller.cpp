// Controller: feed -> snapshot, requests -> runner, the edited environment -> a preview.
#include "controller.h"

#include <algorithm>

#include "furnace/backend.h"   // defines: available_backends
#include "furnace/error.h"     // defines: Error, FURNACE_CHECK
#include "furnace/topology.h"  // defines: load_topology, list_topologies
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
  // torchrun starts rank r on cuda:r (LOCAL_RANK): --device does not apply to DDP.
  if (sc.parallel_mode() == ParallelMode::ddp) sc.device = 0;
  else sc.nproc = -1;  // "--nproc needs --parallel ddp"
  sc.validate();
  return sc;
}

Environment environment_of(const EnvState& env) {
  Environment e;
  if (env.visible_set) e[kCudaVisibleDevices] = env.visible;
  if (!env.order.empty()) e[kCudaDeviceOrder] = env.order;
  return e;
}

bool VisibilityPreview::update(const std::string& topology_name, const EnvState& env) {
  const bool same_env = env.visible_set == env_.visible_set && env.visible == env_.visible && env.order == env_.order;
  if (valid_ && same_env && topology_name == topology_name_) return false;
  if (!valid_ || topology_name != topology_name_) {
    topology_name_ = topology_name;
    topology_ = Topology{};
    error_.clear();
    try {
      topology_ = load_topology(topology_name);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }
  env_ = env;
  visibility_ = resolve_visibility(topology_.gpus, environment_of(env));
  valid_ = true;
  return true;
}

Controller::Controller(AppState& app, bool autostart, Runner::Priority priority)
    : runner_(std::make_unique<Runner>(feed_, priority)) {
  try {
    app.controls.topologies = list_topologies();
  } catch (const std::exception&) {
    app.controls.topologies.clear();
  }
  app.controls.backends = available_backends();
  lessons_.load();
  new_process(app);
  if (autostart) start_training(app);
  refresh_visibility(app);
}

Controller::~Controller() { runner_.reset(); }

void Controller::new_process(AppState& app) {
  runner_->stop();
  preview_.update(app.controls.scenario.topology, app.env);  // the machine it starts on
  if (!preview_.error().empty()) app.controls.error = preview_.error();
  const int generation = builder_.snapshot().run.generation;
  builder_.reset(preview_.topology(), app.controls.scenario.backend);
  builder_.snapshot().run.generation = generation;
  builder_.snapshot().run.message = "a new process: CUDA is not initialised until training starts";
  held_.reset();
  held_frozen_ = false;
  training_ = false;
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
  new_process(app);  // every run is a new process: `python train.py` again
  // Until the run's first device use publishes what it fixed: the environment it was given.
  held_ = preview_.visibility();
  training_ = true;
  RunRequest request;
  request.scenario = sc;
  request.scenario.env = environment_of(app.env);
  if (app.env.visible_set) request.visible_devices = app.env.visible;
  request.lesson_step = app.controls.lesson_step;
  runner_->set_step_delay(app.controls.step_delay_ms / 1000.0);
  runner_->start(std::move(request));
  return true;
}

void Controller::refresh_visibility(const AppState& app) {
  if (preview_.update(app.controls.scenario.topology, app.env)) shown_valid_ = false;
  if (shown_valid_) return;  // nothing changed
  Snapshot& s = builder_.snapshot();
  if (!training_ && !held_ && s.topology.name != preview_.topology().name) {
    // A process that has not started yet runs on the machine being edited.
    const RunStatus run = s.run;
    builder_.reset(preview_.topology(), s.backend);
    builder_.snapshot().run = run;
  }
  s.edited_visibility = preview_.visibility();
  if (!s.process_from_run) {  // the run's own process, once published, is never overwritten
    s.visibility = held_ ? *held_ : preview_.visibility();
    s.visibility_frozen = held_ && held_frozen_;
  }
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
// show the fresh process instead. DistributedDataParallel's train steps run live: its ranks.
bool live_run_shows(const lesson::Step& step) {
  const std::string& a = step.action;
  if (a != "train" && a != "forward" && a != "dp-loss-trap" && a != "loader") return false;
  const lesson::StepSetup& s = step.setup;
  // DDP's ranks train in the live panels; its other actions (a loader's shares) do not run it.
  if (s.scenario().parallel_mode() == ParallelMode::ddp && a != "train") return false;
  const lesson::ForwardSetup* forward = s.as<lesson::ForwardSetup>();  // the only one with these keys
  const bool model_on_cpu = forward && forward->model_device == "cpu";
  const bool bare_input_on_cpu = forward && s.scenario().parallel_mode() != ParallelMode::dp &&
                                 forward->input_device == "cpu" &&
                                 std::find(s.keys.begin(), s.keys.end(), "input_device") != s.keys.end();
  return !model_on_cpu && !bare_input_on_cpu;
}

}  // namespace

void Controller::set_up_step(AppState& app, const lesson::Step& step) {
  const Scenario& sc = step.setup.scenario();
  const lesson::DevicesSetup* devices = step.setup.as<lesson::DevicesSetup>();
  ControlsState& c = app.controls;
  c.scenario = sc;
  if (c.scenario.data_dir.empty()) c.scenario.data_dir = lesson::lesson_data_dir();  // the slice
  // The live run is the step's own: its steps, then it holds with its tensors kept (a finished
  // run has freed them), so the panels show what the step's checks read "after two steps".
  c.lesson_step = step.id;
  c.hidden = join_ints(sc.hidden);
  // The dp-loss-trap action is DataParallel by definition (the 3, 3, 3, 1 split of its batch).
  c.parallel = step.action == "dp-loss-trap" ? "dp" : sc.parallel;
  c.device_ids = sc.device_ids ? join_ints(*sc.device_ids) : "";
  c.output_device = sc.output_device.value_or(-1);
  const std::vector<std::string>& keys = step.setup.keys;
  c.keep_device = std::find(keys.begin(), keys.end(), "device") != keys.end();
  const auto visible = sc.env.find(kCudaVisibleDevices);
  app.env.visible_set = visible != sc.env.end();
  app.env.visible = app.env.visible_set ? visible->second : "";
  // os.environ[...] = ... before the first device use is what the process starts with.
  if (devices && devices->set_visible_before_init) {
    app.env.visible_set = true;
    app.env.visible = *devices->set_visible_before_init;
  }
  const auto order = sc.env.find(kCudaDeviceOrder);
  app.env.order = order != sc.env.end() ? order->second : "FASTEST_FIRST";
  if (auto panel = parse_panel(step.panel)) app.is_open(*panel) = true;
  // Every step is a new `python train.py`, started with the step's environment. The devices
  // lessons are about what a process sees before and at its first device use: the fresh process
  // shows that; the others show their run live.
  // Set, not added to: opening a lesson at step N sets up its first step in the same frame.
  app.new_process_requested = true;
  app.visible_after_first_use = devices ? devices->set_visible_after_init : std::nullopt;
  // A step that asks for a prediction starts its run with "Run and check": until then the panels
  // must not show the answer.
  app.restart_requested = live_run_shows(step) && !step.prediction;
}

void Controller::update_lessons(AppState& app) {
  LessonState& ls = app.lesson;
  if (ls.open_request) {
    lessons_.open(*ls.open_request);
    ls.open_request.reset();
    app.controls.lesson_step.clear();  // back to the list: ordinary runs again
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
    // A prediction step's live run waited for the answer (set_up_step).
    if (const lesson::Step* step = lessons_.view().current_step())
      if (step->prediction && live_run_shows(*step)) app.restart_requested = true;
  }
  lessons_.poll();
}

void Controller::update(AppState& app, double now_s) {
  update_lessons(app);
  if (app.new_process_requested) {
    app.new_process_requested = false;
    new_process(app);
    if (app.visible_after_first_use) {  // the first device use, then the edit that comes too late
      held_ = preview_.visibility();   // what that use fixed: the environment as it was
      held_frozen_ = true;
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
  if (!training_ && !delta_.new_run)
    builder_.snapshot().time_s = now_s;  // a process that has not started a run has no device events
  else
    builder_.ingest(delta_, now_s);  // a new run resets the snapshot, but not an opened trace file
  if (delta_.new_run || delta_.process) shown_valid_ = false;  // the builder reset or took the run's process
  refresh_visibility(app);
  builder_.snapshot().lesson = lessons_.view();  // after ingest: a new run resets the snapshot
}

}  // namespace furnace::viz
