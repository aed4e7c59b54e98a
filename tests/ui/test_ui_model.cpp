// The visualizer's logic without drawing: the feed between threads, the snapshot builder, the
// step flow's stages and playback, trace files, frame statistics, and the controller with a real
// training run on the committed Fashion-MNIST slice (start, stop, restart, CUDA_VISIBLE_DEVICES
// frozen at the first device use), and what the Memory panel reads of a memory lesson step.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "controller.h"
#include "fake_run.h"
#include "frames_until.h"
#include "frame_stats.h"
#include "furnace/error.h"
#include "furnace/op_table.h"  // defines: cpu_gemm_kernel
#include "lesson_driver.h"
#include "panels.h"  // defines: human_seconds, wall_clock_note
#include "step_flow.h"
#include "trace_file.h"

namespace furnace::viz {
namespace {

TraceEvent event(EventKind kind, const char* name, int device, double start = 0, double dur = 0) {
  return testing::trace_event(kind, name, device, start, dur);
}

TEST(TrainingPanel, SaysWhoseWallClockAndOnTheCpuWhichOpenBlasKernel) {
  const std::string kernel = cpu_gemm_kernel();  // what openblas_get_corename() says here
  ASSERT_FALSE(kernel.empty());
  EXPECT_EQ(wall_clock_note("sim", false), "(wall clock, this CPU, OpenBLAS's " + kernel + " kernel)");
  EXPECT_NE(wall_clock_note("sim", true).find("OpenBLAS 的 " + kernel + " 内核"), std::string::npos)
      << wall_clock_note("sim", true);
  // A real GPU's throughput owes nothing to OpenBLAS.
  EXPECT_EQ(wall_clock_note("cuda", false), "(wall clock, on the GPU)");
  EXPECT_EQ(wall_clock_note("cuda", true).find("OpenBLAS"), std::string::npos);
}

// ---- LiveFeed -----------------------------------------------------------------------------

TEST(HumanSeconds, PicksTheUnitAndNeverPrintsMinusZero) {
  EXPECT_EQ(human_seconds(12.3e-6), "12.3 us");
  EXPECT_EQ(human_seconds(4.561e-3), "4.56 ms");
  EXPECT_EQ(human_seconds(1.2), "1.20 s");
  EXPECT_EQ(human_seconds(-1e-12), "0.0 us");  // a timeline tick a rounding error left of zero
  // A time axis keeps one unit, the one of its largest value, with the decimals its ticks need.
  EXPECT_EQ(axis_seconds(0.0, 0.5e-3, 2e-3), "0.0 ms");
  EXPECT_EQ(axis_seconds(0.5e-3, 0.5e-3, 2e-3), "0.5 ms");
  EXPECT_EQ(axis_seconds(2e-3, 1e-3, 2.4e-3), "2 ms");
  EXPECT_EQ(axis_seconds(1.25e-3, 0.05e-3, 1.3e-3), "1.25 ms");
  EXPECT_EQ(axis_seconds(200e-6, 100e-6, 900e-6), "200 us");
  EXPECT_EQ(axis_seconds(3.5, 0.5, 4.0), "3.5 s");
  EXPECT_EQ(axis_seconds(-1e-12, 0.2e-3, 1e-3), "0.0 ms");
}

TEST(LiveFeed, HandsOverEventsInOrderOnce) {
  LiveFeed feed(64);
  feed.begin_run("sim", RunStatus{});
  ProcessRecord process;
  process.topology = load_topology("laptop-4060");
  feed.on_process(process);
  for (int i = 0; i < 10; ++i) feed.on_event(event(EventKind::kernel, "k", 0, i));
  FeedDelta d;
  feed.pull(d);
  ASSERT_EQ(d.events.size(), 10u);
  EXPECT_TRUE(d.new_run);
  ASSERT_TRUE(d.process.has_value());
  EXPECT_EQ(d.process->topology.name, "laptop-4060");
  EXPECT_TRUE(d.status.cuda_initialised);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(d.events[static_cast<size_t>(i)].start_s, i);
  feed.pull(d);
  EXPECT_TRUE(d.events.empty());
  EXPECT_FALSE(d.new_run);
  EXPECT_FALSE(d.process.has_value());
}

// A process record is never lost to the ring, and a new run forgets the previous run's.
TEST(LiveFeed, KeepsTheRunsProcessApartFromTheRing) {
  LiveFeed feed(16);
  feed.begin_run("sim", RunStatus{});
  ProcessRecord process;
  process.topology.name = "first";
  feed.on_process(process);
  for (int i = 0; i < 40; ++i) feed.on_event(event(EventKind::kernel, "k", 0, i));
  FeedDelta d;
  feed.pull(d);
  EXPECT_EQ(d.dropped, 24u);
  ASSERT_TRUE(d.process.has_value());
  EXPECT_EQ(d.process->topology.name, "first");
  feed.on_process(process);
  feed.begin_run("sim", RunStatus{});
  feed.pull(d);
  EXPECT_TRUE(d.new_run);
  EXPECT_FALSE(d.process.has_value());
}

TEST(LiveFeed, CountsWhatItDropsWhenTheUiFallsBehind) {
  LiveFeed feed(16);
  for (int i = 0; i < 40; ++i) feed.on_event(event(EventKind::kernel, "k", 0, i));
  FeedDelta d;
  feed.pull(d);
  EXPECT_EQ(d.events.size(), 16u);
  EXPECT_EQ(d.dropped, 24u);
  EXPECT_EQ(d.events.front().start_s, 24);  // the newest are kept
}

TEST(LiveFeed, KeepsEachIntervalsMemoryPeak) {
  LiveFeed feed;
  auto mem = [&](int64_t a) {
    TraceEvent e = event(EventKind::alloc, "alloc", 1);
    e.allocated = a;
    e.reserved = 100;
    feed.on_event(e);
  };
  mem(10), mem(90), mem(20);
  FeedDelta d;
  feed.pull(d);
  ASSERT_GE(d.memory.size(), 2u);
  EXPECT_EQ(d.memory[1].allocated, 20);
  EXPECT_EQ(d.memory[1].max_allocated, 90);
  feed.pull(d);
  EXPECT_EQ(d.memory[1].max_allocated, 20);  // the next interval starts from the current value
  EXPECT_TRUE(d.status.cuda_initialised);
}

// ---- SnapshotBuilder ------------------------------------------------------------------------

TEST(SnapshotBuilder, GroupsPhasesIntoStepsWithTheCopiesInsideThem) {
  SnapshotBuilder b = testing::fake_dp_run(3);
  const Snapshot& s = b.snapshot();
  ASSERT_EQ(s.steps.size(), 3u);
  const StepPhases& step = s.steps.back();
  EXPECT_EQ(step.step, 2);
  EXPECT_NEAR(step.loss, 2.3 * std::exp(-0.02), 1e-5);
  const PhaseSpan& scatter = step.spans.front();
  EXPECT_STREQ(scatter.name, "scatter");
  EXPECT_EQ(scatter.copy_bytes, 200704u);
  EXPECT_EQ(step_devices(step), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(hub_device(step), 0);
}

TEST(SnapshotBuilder, ReadsMemoryPerPhysicalGpuAndMarksUsedOnes) {
  SnapshotBuilder b = testing::fake_dp_run(2);
  const Snapshot& s = b.snapshot();
  ASSERT_EQ(s.devices.size(), 8u);
  EXPECT_GT(s.devices[0].allocated, s.devices[1].allocated);  // DataParallel's heavier GPU 0
  EXPECT_TRUE(s.devices[3].used);
  EXPECT_FALSE(s.devices[4].used);
  EXPECT_EQ(s.devices[0].context, 500ull << 20);
}

// furnace-viz --trace-file opens the file before the first run starts: the run's reset keeps it.
TEST(SnapshotBuilder, ANewRunKeepsTheOpenedTraceFile) {
  SnapshotBuilder b;
  b.reset(load_topology("laptop-4060"), "sim");
  b.snapshot().file_timeline.source = "run.json";
  b.snapshot().file_timeline.track(0, 0).events.push_back(TimelineEvent{});
  FeedDelta d;
  d.new_run = true;
  d.backend = "sim";
  b.ingest(d, 1.0);
  EXPECT_EQ(b.snapshot().file_timeline.source, "run.json");
  EXPECT_EQ(b.snapshot().file_timeline.tracks.size(), 1u);
  b.reset(load_topology("dgx-h100"), "sim");  // the preview moved to another machine
  EXPECT_EQ(b.snapshot().file_timeline.source, "run.json");
}

// The machine and the cuda:N -> GPU map are the ones the run published at its first device use,
// whatever the view showed before (here a preview on another machine).
TEST(SnapshotBuilder, MapsLogicalDevicesToPhysicalGpusFromTheRunsProcess) {
  SnapshotBuilder b;
  b.reset(load_topology("laptop-4060"), "sim");  // a fresh process's preview
  EXPECT_FALSE(b.snapshot().process_from_run);
  FeedDelta d;
  d.new_run = true;
  d.backend = "sim";
  ProcessRecord p;
  p.topology = load_topology("workstation-4x3090");
  p.environment[kCudaVisibleDevices] = "2,3";
  p.visibility = resolve_visibility(p.topology.gpus, p.environment);
  d.process = p;
  TraceEvent e = event(EventKind::alloc, "alloc", 1);
  e.allocated = 1234;
  d.events.push_back(e);
  b.ingest(d, 0);
  const Snapshot& s = b.snapshot();
  EXPECT_TRUE(s.process_from_run);
  EXPECT_TRUE(s.visibility_frozen);
  EXPECT_EQ(s.topology.name, "workstation-4x3090");
  ASSERT_EQ(s.devices.size(), 4u);
  ASSERT_EQ(s.visibility.count(), 2);
  EXPECT_EQ(s.visibility.devices[1].physical_index, 3);
  EXPECT_EQ(s.devices[3].allocated, 1234);  // cuda:1 is GPU 3
  EXPECT_FALSE(s.devices[1].used);

  FeedDelta next;  // a restart: a new process, its own map to come
  next.new_run = true;
  b.ingest(next, 1);
  EXPECT_FALSE(b.snapshot().process_from_run);
  EXPECT_FALSE(b.snapshot().visibility_frozen);
  EXPECT_EQ(b.snapshot().topology.name, "workstation-4x3090");
}

TEST(SnapshotBuilder, DecimatesLongCurvesByPairwiseMeans) {
  SnapshotBuilder b;
  b.reset(load_topology("laptop-4060"), "sim");
  for (int i = 0; i < TrainingSeries::kMaxPoints; ++i) {
    Progress p;
    p.loss = static_cast<float>(i % 2);  // 0, 1, 0, 1 ... -> 0.5 after halving
    b.add_progress(p);
  }
  const TrainingSeries& t = b.snapshot().training;
  EXPECT_EQ(t.stride, 2);
  ASSERT_EQ(static_cast<int>(t.loss.size()), TrainingSeries::kMaxPoints / 2);
  EXPECT_FLOAT_EQ(t.loss.front(), 0.5f);
}

TEST(History, KeepsTheNewestSamplesOldestFirst) {
  History h(3);
  for (int i = 1; i <= 5; ++i) h.push(static_cast<float>(i));
  ASSERT_EQ(h.size(), 3);
  EXPECT_EQ(h.at(0), 3);
  EXPECT_EQ(h.back(), 5);
  EXPECT_EQ(h.max(), 5);
}

TEST(TimelineData, KeepsTracksOrderedAndBounded) {
  TimelineData t;
  t.max_events_per_track = 100;
  for (int i = 0; i < 250; ++i) t.append(1, 0, TimelineEvent{static_cast<double>(i), 0.5});
  t.append(0, TimelineTrack::kPhases, TimelineEvent{});
  t.append(-1, 0, TimelineEvent{});
  ASSERT_EQ(t.tracks.size(), 3u);
  EXPECT_EQ(t.tracks[0].label, "host stream 0");
  EXPECT_EQ(t.tracks[1].label, "cuda:0 phases");
  EXPECT_EQ(t.tracks[2].label, "cuda:1 stream 0");
  EXPECT_LE(t.tracks[2].events.size(), 100u);
  EXPECT_EQ(t.tracks[2].events.back().start, 249);
  EXPECT_EQ(t.t_max, 249.5);
}

// ---- the step flow --------------------------------------------------------------------------

TEST(StepFlow, NamesMapToStageKinds) {
  EXPECT_EQ(stage_kind("h2d"), StageKind::host_to_device);
  EXPECT_EQ(stage_kind("scatter"), StageKind::scatter);
  EXPECT_EQ(stage_kind("replicate"), StageKind::replicate);
  EXPECT_EQ(stage_kind("gather"), StageKind::gather);
  EXPECT_EQ(stage_kind("reduce"), StageKind::reduce);
  EXPECT_EQ(stage_kind("optimizer"), StageKind::optimizer);
  EXPECT_EQ(stage_kind("unscale"), StageKind::scaler);
  EXPECT_EQ(stage_kind("loss_scale_update"), StageKind::scaler);
  EXPECT_EQ(stage_kind("something new"), StageKind::other);
}

TEST(StepFlow, AccumulationMicroStepsBecomeStagesOfTheirOwn) {
  StepPhases step;
  for (int micro = 0; micro < 2; ++micro)
    for (const char* n : {"forward", "loss", "backward"}) step.spans.push_back(PhaseSpan{n, 0, 0, 1e-6});
  step.spans.push_back(PhaseSpan{"optimizer", 0, 0, 1e-6});
  const std::vector<Stage> stages = build_stages(step);
  ASSERT_EQ(stages.size(), 7u);
  EXPECT_EQ(stages[3].repeat, 2);
  EXPECT_STREQ(stages[3].name, "forward");
}

TEST(StepFlow, ParallelPhasesOnSeveralDevicesAreOneStage) {
  StepPhases step;
  for (int d = 0; d < 4; ++d) step.spans.push_back(PhaseSpan{"forward", d, 0, 1e-6 * (d + 1)});
  const std::vector<Stage> stages = build_stages(step);
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0].spans.size(), 4u);
  EXPECT_DOUBLE_EQ(stages[0].dur, 4e-6);
}

// DataParallel on two devices, as the trace has it: device 1's replicate waits for device 0's
// optimizer of the step before, so the stages add up to more than the time between steps.
TEST(StepFlow, TheStepTimeIsFromOneStepsEndToTheNextNotTheStagesAddedUp) {
  auto dp_step = [](int64_t index, double t0) {
    StepPhases s;
    s.step = index;
    s.spans = {PhaseSpan{"scatter", 1, t0, 10e-6}, PhaseSpan{"scatter", 0, t0 + 20e-6, 10e-6},
               PhaseSpan{"replicate", 1, t0 + 10e-6, 40e-6}, PhaseSpan{"replicate", 0, t0 + 30e-6, 20e-6},
               PhaseSpan{"forward", 0, t0 + 50e-6, 30e-6}, PhaseSpan{"forward", 1, t0 + 50e-6, 30e-6},
               PhaseSpan{"optimizer", 0, t0 + 80e-6, 20e-6}};
    return s;
  };
  const StepPhases first = dp_step(0, 0), second = dp_step(1, 90e-6);  // overlaps first's optimizer
  EXPECT_NEAR(step_period(first, second), 90e-6, 1e-12);
  double stages = 0;
  for (const Stage& st : build_stages(second)) stages += st.dur;
  EXPECT_NEAR(stages, 100e-6, 1e-12);  // 10 + 40 + 30 + 20: more than the 90 between ends
  EXPECT_EQ(step_period(second, first), 0);  // not the step before
  EXPECT_EQ(step_period(dp_step(3, 0), second), 0);
}

TEST(StepFlow, TheFirstStepIsShownOnlyWhenNoOtherComes) {
  StepPhases first;
  first.step = 0;
  StepPhases later;
  later.step = 5;
  EXPECT_FALSE(worth_showing_first(first, /*run_going=*/true));
  EXPECT_TRUE(worth_showing_first(first, /*run_going=*/false));
  EXPECT_TRUE(worth_showing_first(later, /*run_going=*/true));
}

// Under --loading the wait for data arrives as phases outside any step (step -1): never shown.
TEST(StepFlow, TheNewestStepIsATrainingStep) {
  std::vector<StepPhases> steps(3);
  steps[0].step = 4;
  steps[1].step = 5;
  steps[2].step = -1;  // "waiting for data (host loading)" before step 6
  ASSERT_NE(newest_step(steps), nullptr);
  EXPECT_EQ(newest_step(steps)->step, 5);
  EXPECT_EQ(newest_step({}), nullptr);
  EXPECT_EQ(newest_step(std::vector<StepPhases>(1)), nullptr);  // step -1 alone
}

TEST(StepFlowPlayer, PlaysTransitionsWithPausesAndWrapsAtTheEnd) {
  StepFlowPlayer p;
  const float per_stage = StepFlowPlayer::kTransition + StepFlowPlayer::kHold;
  EXPECT_FALSE(p.advance(per_stage * 0.5f, 3));
  EXPECT_EQ(p.stage, 0);
  EXPECT_FALSE(p.advance(per_stage * 0.6f, 3));
  EXPECT_EQ(p.stage, 1);
  p.speed = 2;
  EXPECT_FALSE(p.advance(per_stage * 0.55f, 3));
  EXPECT_EQ(p.stage, 2);
  EXPECT_TRUE(p.advance(per_stage * 0.55f, 3));  // the step ended
  EXPECT_EQ(p.stage, 0);
}

TEST(StepFlowPlayer, StepPlaysOnePhaseThenPauses) {
  StepFlowPlayer p;
  p.playing = false;
  p.step_phase(5);  // stage 0 has not begun: it plays first
  EXPECT_EQ(p.stage, 0);
  p.advance(1.0f, 5);
  EXPECT_FALSE(p.playing);
  EXPECT_FLOAT_EQ(p.transition(), 1.0f);
  p.step_phase(5);
  EXPECT_EQ(p.stage, 1);
  p.jump(4);
  EXPECT_EQ(p.stage, 4);
  EXPECT_EQ(p.t, 0);
}

// ---- trace files ----------------------------------------------------------------------------

TEST(TraceFile, ReadsWhatTheChromeTraceWriterWrites) {
  TraceBus bus;
  ChromeTraceWriter writer(bus);
  writer.set_device_names({"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"});
  TraceEvent k = event(EventKind::kernel, "linear_forward", 1, 2e-6, 3e-6);
  k.flops = 1e6;
  bus.emit(k);
  TraceEvent c = event(EventKind::copy, "h2d", 0, 1e-6, 1e-6);
  c.bytes = 4096;
  bus.emit(c);
  TraceEvent ph = event(EventKind::phase, "forward", 1, 2e-6, 3e-6);
  ph.step = 0;
  bus.emit(ph);
  bus.emit(event(EventKind::step, "step", 1, 5e-6));
  const TimelineData t = parse_chrome_trace(writer.to_json(), "run.json");
  ASSERT_EQ(t.tracks.size(), 3u);  // cuda:0 stream 0, cuda:1 phases, cuda:1 stream 0
  EXPECT_EQ(t.tracks[0].label, "cuda:0 NVIDIA H100 80GB HBM3 / stream 0");
  EXPECT_EQ(t.tracks[0].events[0].kind, EventKind::copy);
  EXPECT_EQ(t.tracks[0].events[0].bytes, 4096u);
  EXPECT_EQ(t.tracks[1].stream, TimelineTrack::kPhases);
  EXPECT_STREQ(t.tracks[2].events[0].name, "linear_forward");
  EXPECT_NEAR(t.tracks[2].events[0].dur, 3e-6, 1e-12);
  EXPECT_NEAR(t.t_min, 1e-6, 1e-12);
  EXPECT_NEAR(t.t_max, 5e-6, 1e-12);
  const TimelineData copy = t;  // names stay valid in copies
  EXPECT_STREQ(copy.tracks[2].events[0].name, "linear_forward");
}

TEST(TraceFile, ReadsBeginEndPairsAndBareArrays) {
  const TimelineData t = parse_chrome_trace(
      R"([{"ph":"B","name":"step","pid":3,"tid":1,"ts":100},{"ph":"E","pid":3,"tid":1,"ts":150}])", "a.json");
  ASSERT_EQ(t.tracks.size(), 1u);
  EXPECT_NEAR(t.tracks[0].events[0].dur, 50e-6, 1e-12);
}

TEST(TraceFile, SaysWhatIsWrongInOneLine) {
  EXPECT_THROW(parse_chrome_trace("{", "x.json"), Error);
  EXPECT_THROW(parse_chrome_trace(R"({"a":1})", "x.json"), Error);
  EXPECT_THROW(parse_chrome_trace(R"({"traceEvents":[]})", "x.json"), Error);
  try {
    load_chrome_trace("/nonexistent/trace.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/trace.json: cannot open"), std::string::npos);
  }
}

// ---- small pieces ---------------------------------------------------------------------------

TEST(FrameStats, NearestRankPercentiles) {
  FrameStats s;
  for (int i = 1; i <= 100; ++i) s.add(i);
  EXPECT_EQ(s.percentile(50), 50);
  EXPECT_EQ(s.percentile(99), 99);
  EXPECT_EQ(s.percentile(100), 100);
  EXPECT_EQ(FrameStats().percentile(50), 0);
}

TEST(Controls, HiddenLayersAreCheckedAsTyped) {
  EXPECT_EQ(parse_hidden("512,256"), (std::vector<int>{512, 256}));
  EXPECT_THROW(parse_hidden("512,,3"), Error);
  EXPECT_THROW(parse_hidden("wide"), Error);
  ControlsState c;
  c.scenario.batch = 0;
  EXPECT_THROW(scenario_from_controls(c), Error);
}

// ---- the controller with a real run -----------------------------------------------------------

AppState slice_app() {
  AppState app;
  app.controls.scenario.topology = "workstation-4x3090";
  app.controls.scenario.data_dir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  app.controls.scenario.hidden = {32};
  app.controls.hidden = "32";
  app.controls.scenario.batch = 100;
  app.controls.scenario.epochs = 50;
  app.controls.scenario.evaluate = false;
  app.controls.step_delay_ms = 1;
  return app;
}


TEST(Controller, TrainsLiveAndStopsWhenAsked) {
  AppState app = slice_app();
  Controller c(app);
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.training.global_step >= 5; }))
      << c.snapshot().run.message;
  const Snapshot& s = c.snapshot();
  EXPECT_EQ(s.run.state, RunStatus::State::running);
  EXPECT_TRUE(s.devices[0].used);
  EXPECT_GT(s.devices[0].allocated, 0);
  EXPECT_GE(s.devices[0].reserved, s.devices[0].allocated);
  EXPECT_FALSE(s.devices[1].used);
  EXPECT_FALSE(s.steps.empty());
  EXPECT_FALSE(s.training.accuracy.empty());
  EXPECT_GT(s.timeline.event_count(), 0u);

  app.stop_requested = true;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.run.state == RunStatus::State::stopped; }, 10));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

TEST(Controller, DataParallelShowsEveryReplicaAndAHeavierGpu0) {
  AppState app = slice_app();
  app.controls.parallel = "dp";
  app.controls.device_ids = "0,1,2";
  Controller c(app);
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.training.global_step >= 3 && !s.steps.empty(); }))
      << c.snapshot().run.message;
  const Snapshot& s = c.snapshot();
  const StepPhases& step = s.steps.back();
  EXPECT_EQ(step_devices(step), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(hub_device(step), 0);
  std::vector<std::string> names;
  for (const Stage& st : build_stages(step)) names.push_back(st.name);
  for (const char* phase : {"scatter", "replicate", "forward", "gather", "loss", "backward", "reduce", "optimizer"})
    EXPECT_NE(std::find(names.begin(), names.end(), phase), names.end()) << phase;
  EXPECT_TRUE(s.devices[2].used);
  EXPECT_FALSE(s.devices[3].used);
  EXPECT_GT(s.devices[0].peak_allocated, s.devices[1].peak_allocated);  // master params, grads, momentum
}

TEST(Controller, ARestartIsANewProcessAndANewRun) {
  AppState app = slice_app();
  Controller c(app);
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.training.global_step >= 2; }));
  const int generation = c.snapshot().run.generation;
  app.controls.scenario.batch = 50;
  app.restart_requested = true;
  ASSERT_TRUE(frames_until(c, app, [&](const Snapshot& s) {
    return s.run.generation > generation && s.training.global_step >= 2;
  })) << c.snapshot().run.message;
  EXPECT_NE(c.snapshot().run.scenario.find("batch 50"), std::string::npos);
}

TEST(Controller, CudaVisibleDevicesIsFrozenAtTheFirstDeviceUse) {
  AppState app = slice_app();
  Controller c(app, /*autostart=*/false);  // a process that has not used CUDA yet
  c.update(app, 0);
  EXPECT_FALSE(c.snapshot().visibility_frozen);
  EXPECT_EQ(c.snapshot().visibility.count(), 4);
  app.env.visible_set = true;
  app.env.visible = "2,1";  // before the first use: the mapping follows the edit
  c.update(app, 0);
  ASSERT_EQ(c.snapshot().visibility.count(), 2);
  EXPECT_EQ(c.snapshot().visibility.devices[0].physical_index, 2);

  app.restart_requested = true;  // training starts: the first device use
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.training.global_step >= 1; }))
      << c.snapshot().run.message;
  EXPECT_TRUE(c.snapshot().visibility_frozen);
  EXPECT_TRUE(c.snapshot().devices[2].used);  // cuda:0 is GPU 2
  EXPECT_FALSE(c.snapshot().devices[0].used);

  app.env.visible = "3";  // after it: nothing changes for this process
  c.update(app, 1);
  EXPECT_EQ(c.snapshot().visibility.count(), 2);
  EXPECT_EQ(c.snapshot().visibility.devices[0].physical_index, 2);
  ASSERT_EQ(c.snapshot().edited_visibility.count(), 1);  // ... but a new process would see GPU 3
  EXPECT_EQ(c.snapshot().edited_visibility.devices[0].physical_index, 3);
}

// The Devices panel draws the run's own process: its machine and map arrive with the run's first
// device use, and nothing the UI edits afterwards changes them.
TEST(Controller, TheSnapshotShowsTheProcessTheRunPublished) {
  AppState app = slice_app();
  app.env.visible_set = true;
  app.env.visible = "3,0";
  Controller c(app);
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.process_from_run && s.training.global_step >= 1; }))
      << c.snapshot().run.message;
  const Snapshot& s = c.snapshot();
  EXPECT_TRUE(s.visibility_frozen);
  EXPECT_EQ(s.topology.name, "workstation-4x3090");
  ASSERT_EQ(s.visibility.count(), 2);
  EXPECT_EQ(s.visibility.devices[0].physical_index, 3);
  EXPECT_EQ(s.visibility.devices[1].physical_index, 0);
  EXPECT_EQ(s.visibility.cuda_visible_devices, std::optional<std::string>("3,0"));
  EXPECT_TRUE(s.devices[3].used);  // cuda:0 is GPU 3
  EXPECT_FALSE(s.devices[0].used);
  app.env.visible = "1";  // an edit: only the preview follows
  c.update(app, 100);
  EXPECT_EQ(c.snapshot().visibility.devices[0].physical_index, 3);
  ASSERT_EQ(c.snapshot().edited_visibility.count(), 1);
  EXPECT_EQ(c.snapshot().edited_visibility.devices[0].physical_index, 1);
}

// Before any run, the Devices panel shows a preview: the edited environment on the edited machine,
// following each edit, with the machine parsed once per edit rather than once per frame.
TEST(Controller, ThePreviewFollowsAnEditWithoutARun) {
  AppState app = slice_app();
  Controller c(app, /*autostart=*/false);
  c.update(app, 0);
  EXPECT_FALSE(c.snapshot().process_from_run);
  EXPECT_FALSE(c.snapshot().visibility_frozen);
  EXPECT_EQ(c.snapshot().visibility.count(), 4);
  const GpuSpec* parsed = c.preview().topology().gpus.data();
  for (int frame = 1; frame < 5; ++frame) c.update(app, frame);
  EXPECT_EQ(c.preview().topology().gpus.data(), parsed);  // not parsed again
  app.env.visible_set = true;
  app.env.visible = "1,0,7";
  c.update(app, 5);
  EXPECT_EQ(c.preview().topology().gpus.data(), parsed);  // an environment edit re-resolves only
  ASSERT_EQ(c.snapshot().visibility.count(), 2);
  EXPECT_EQ(c.snapshot().visibility.stop, VisibilityStop::out_of_range);
  EXPECT_EQ(c.snapshot().edited_visibility.count(), 2);
  app.controls.scenario.topology = "dgx-h100";  // a machine edit parses the new machine
  c.update(app, 6);
  EXPECT_EQ(c.preview().topology().name, "dgx-h100");
  EXPECT_EQ(c.snapshot().topology.name, "dgx-h100");  // the process has not started: it follows
  EXPECT_EQ(c.snapshot().devices.size(), 8u);
  EXPECT_EQ(c.snapshot().visibility.count(), 3);  // 1, 0 and 7 exist on eight GPUs
  EXPECT_EQ(c.snapshot().edited_visibility.count(), 3);
  EXPECT_EQ(c.snapshot().run.state, RunStatus::State::idle);  // no run was started
  // The Controls panel's choices, listed by the Controller (panels do not ask the runtime).
  const std::vector<std::string>& machines = app.controls.topologies;
  EXPECT_NE(std::find(machines.begin(), machines.end(), "dgx-h100"), machines.end());
  EXPECT_EQ(app.controls.backends.back(), "sim");
}

// Lesson 1's last two steps set os.environ["CUDA_VISIBLE_DEVICES"] = "1" after and before the
// first device use: the Devices panel must show what the lesson's checks say (all four GPUs in
// the first case, only GPU 1 in the second), not the unset variable of the step's environment.
TEST(Controller, ALessonStepSettingTheVariableInCodeShowsItsEffectInTheDevicesPanel) {
  AppState app = slice_app();
  Controller c(app, /*autostart=*/false);
  const int index = c.lessons().find("01-single-card");
  ASSERT_GE(index, 0) << "lessons/01-single-card is missing";
  app.lesson.open_request = index;
  c.update(app, 0);
  const lesson::Lesson& l = *c.snapshot().lesson.open_lesson();
  auto step_of = [&](auto has) {
    for (size_t i = 0; i < l.steps.size(); ++i)
      if (has(l.steps[i].setup)) return static_cast<int>(i);
    return -1;
  };
  const int too_late = step_of([](const lesson::StepSetup& s) {
    const auto* d = s.as<lesson::DevicesSetup>();
    return d && d->set_visible_after_init == "1";
  });
  const int early = step_of([](const lesson::StepSetup& s) {
    const auto* d = s.as<lesson::DevicesSetup>();
    return d && d->set_visible_before_init == "1";
  });
  ASSERT_GE(too_late, 0);
  ASSERT_GE(early, 0);

  app.lesson.step_request = too_late;
  c.update(app, 1);
  EXPECT_TRUE(c.snapshot().visibility_frozen);  // CUDA started before the edit
  EXPECT_EQ(c.snapshot().visibility.count(), 4);
  EXPECT_EQ(app.env.visible, "1");  // os.environ did change ...
  ASSERT_EQ(c.snapshot().edited_visibility.count(), 1);  // ... and only a new process would see it
  EXPECT_EQ(c.snapshot().edited_visibility.devices[0].physical_index, 1);

  app.lesson.step_request = early;
  c.update(app, 2);
  EXPECT_FALSE(c.snapshot().visibility_frozen);
  ASSERT_EQ(c.snapshot().visibility.count(), 1);
  EXPECT_EQ(c.snapshot().visibility.devices[0].physical_index, 1);  // cuda:0 is GPU 1
}

// A lesson opened on a training step (lesson 2 starts with CUDA_VISIBLE_DEVICES=0,1 and
// DataParallel) trains in a process started with the step's environment: two GPUs, not the four
// of the shell's environment the visualizer started with.
TEST(Controller, ALessonStepTrainsInAProcessWithItsEnvironment) {
  AppState app = slice_app();
  Controller c(app, /*autostart=*/false);
  const int index = c.lessons().find("02-data-parallel");
  ASSERT_GE(index, 0) << "lessons/02-data-parallel is missing";
  const lesson::Step& first = c.lessons().view().lessons->at(static_cast<size_t>(index)).steps.at(0);
  ASSERT_EQ(first.setup.scenario().env.at(kCudaVisibleDevices), "0,1");
  ASSERT_EQ(first.setup.scenario().parallel, "dp");
  app.lesson.open_request = index;
  c.update(app, 0);
  EXPECT_EQ(c.snapshot().run.state, RunStatus::State::idle);  // it asks a prediction: no run yet
  app.lesson.run_request = true;  // "Run and check" starts the step's own run
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.training.global_step >= 1; }))
      << c.snapshot().run.message;
  EXPECT_EQ(app.controls.lesson_step, first.id);  // the step's own steps, then it holds
  EXPECT_EQ(app.controls.scenario.max_steps, first.setup.scenario().max_steps);
  EXPECT_TRUE(c.snapshot().visibility_frozen);
  EXPECT_EQ(c.snapshot().visibility.count(), 2);
  EXPECT_TRUE(c.snapshot().devices[1].used);  // GPU 1 holds a replica ...
  EXPECT_FALSE(c.snapshot().devices[2].used);  // ... GPUs 2 and 3 are not visible
  EXPECT_FALSE(c.snapshot().devices[3].used);
}

// A step that builds the model with model.cuda() before nn.DataParallel(model, device_ids=[2, 3])
// fails live as in the lesson: PyTorch's "Invalid device id", not an invalid model device.
TEST(Controller, ALessonStepKeepsTheModelDeviceItSets) {
  AppState app = slice_app();
  Controller c(app, /*autostart=*/false);
  const int index = c.lessons().find("03-device-mapping");
  ASSERT_GE(index, 0) << "lessons/03-device-mapping is missing";
  const std::vector<lesson::Step>& steps = c.lessons().view().lessons->at(static_cast<size_t>(index)).steps;
  const auto it = std::find_if(steps.begin(), steps.end(), [](const lesson::Step& s) {
    return s.setup.scenario().device_ids == std::vector<int>{2, 3};
  });
  ASSERT_NE(it, steps.end());
  app.lesson.open_request = index;
  c.update(app, 0);
  app.lesson.step_request = static_cast<int>(it - steps.begin());
  c.update(app, 0);
  app.lesson.run_request = it->prediction.has_value();  // a prediction step runs with "Run and check"
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.run.state == RunStatus::State::failed; }, 20))
      << c.snapshot().run.message;
  EXPECT_NE(c.snapshot().run.message.find("Invalid device id"), std::string::npos) << c.snapshot().run.message;
}

// The Training panel's accumulation line comes from the run: Scenario::accum and the trainer's
// micro_step events (it used to say "one micro-batch per optimizer step" whatever the run did).
TEST(Controller, ARunWithAccumulationReportsItsMicroSteps) {
  AppState app = slice_app();
  app.controls.scenario.accum = 4;
  Controller c(app, /*autostart=*/true);
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.training.global_step >= 2; }))
      << c.snapshot().run.message;
  EXPECT_EQ(c.snapshot().training.accumulation, 4);
  EXPECT_GE(c.snapshot().training.micro_step, 1);
  EXPECT_LE(c.snapshot().training.micro_step, 4);
}

// Lesson 2's "forgot model.cuda()" step fails in PyTorch; the live trainer cannot leave the model
// on the CPU, so the step starts no run (a run would train and contradict the text).
TEST(Controller, ALessonStepAboutAModelLeftOnTheCpuStartsNoRun) {
  AppState app = slice_app();
  Controller c(app, /*autostart=*/false);
  const int index = c.lessons().find("02-data-parallel");
  ASSERT_GE(index, 0) << "lessons/02-data-parallel is missing";
  const std::vector<lesson::Step>& steps = c.lessons().view().lessons->at(static_cast<size_t>(index)).steps;
  const auto it = std::find_if(steps.begin(), steps.end(), [](const lesson::Step& s) {
    const auto* f = s.setup.as<lesson::ForwardSetup>();
    return f && f->model_device == "cpu";
  });
  ASSERT_NE(it, steps.end());
  app.lesson.open_request = index;
  c.update(app, 0);
  app.lesson.run_request = true;  // step 1 asks a prediction: its run starts with "Run and check"
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.training.global_step >= 1; }));  // step 1 trains
  app.lesson.step_request = static_cast<int>(it - steps.begin());
  for (int frame = 0; frame < 20; ++frame) {
    c.update(app, 1 + frame * 0.05);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(c.snapshot().visibility_frozen);  // a fresh process that has not used CUDA
  EXPECT_EQ(c.snapshot().training.global_step, 0);

  // The same when the lesson is opened at that step (furnace-viz --lesson-step): the first
  // step's run, set up in the same frame, must not start either.
  AppState app2 = slice_app();
  Controller c2(app2, /*autostart=*/false);
  app2.lesson.open_request = index;
  app2.lesson.step_request = static_cast<int>(it - steps.begin());
  for (int frame = 0; frame < 20; ++frame) {
    c2.update(app2, frame * 0.05);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(c2.snapshot().visibility_frozen);
  EXPECT_EQ(c2.snapshot().run.state, RunStatus::State::idle);
}

// Lesson 5's DataParallel step: its live run is the step's own (two steps), and it holds after
// them with its tensors kept, so the Memory panel shows what the PASS lines say: cuda:0 holds the
// model, cuda:1 nothing (the replica lived only during the step). Before "Run and check" nothing
// runs: the prediction asks for exactly that number.
TEST(Controller, ALessonStepsRunHoldsAfterItsStepsAndWaitsForThePrediction) {
  AppState app = slice_app();
  Controller c(app, /*autostart=*/false);
  const int index = c.lessons().find("05-memory");
  ASSERT_GE(index, 0) << "lessons/05-memory is missing";
  app.lesson.open_request = index;
  c.update(app, 0);
  const int step = c.snapshot().lesson.open_lesson()->step_index("gpu0-imbalance");
  ASSERT_GE(step, 0);
  app.lesson.step_request = step;
  for (int frame = 0; frame < 10; ++frame) c.update(app, frame * 0.05);
  EXPECT_TRUE(c.snapshot().lesson.awaiting_answer());
  EXPECT_EQ(c.snapshot().run.state, RunStatus::State::idle);
  app.lesson.run_request = true;
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.run.held; }, 60)) << c.snapshot().run.message;
  const Snapshot& s = c.snapshot();
  EXPECT_EQ(s.training.global_step, 2);
  EXPECT_EQ(s.run.state, RunStatus::State::running);
  EXPECT_GT(s.devices[0].allocated, 0);   // cuda:0 = GPU 0: the model, its gradients, the momentum
  EXPECT_EQ(s.devices[1].allocated, 0);   // cuda:1: nothing after the step
  EXPECT_GT(s.devices[1].peak_allocated, 0);  // ... though its replica was there during it
}

TEST(Controller, ALessonStepSetsUpItsScenarioAndRunsItsChecksOffTheUiThread) {
  AppState app = slice_app();
  Controller c(app, /*autostart=*/false);
  const int index = c.lessons().find("01-single-card");
  ASSERT_GE(index, 0) << "lessons/01-single-card is missing";
  app.lesson.open_request = index;
  c.update(app, 0);
  const LessonView& v = c.snapshot().lesson;
  ASSERT_NE(v.open_lesson(), nullptr);
  EXPECT_TRUE(app.is_open(PanelId::lesson));
  const lesson::Step& first = v.open_lesson()->steps[0];
  EXPECT_EQ(app.controls.scenario.topology, first.setup.scenario().topology);
  if (auto it = first.setup.scenario().env.find(kCudaVisibleDevices); it != first.setup.scenario().env.end()) {
    EXPECT_TRUE(app.env.visible_set);
    EXPECT_EQ(app.env.visible, it->second);
  }
  if (auto panel = parse_panel(first.panel)) EXPECT_TRUE(app.is_open(*panel));

  app.lesson.run_request = true;
  c.update(app, 0);
  // The step runs on the lesson thread (a devices step may already be done by now).
  EXPECT_TRUE(c.snapshot().lesson.running || c.snapshot().lesson.outcome(0) != nullptr);
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return !s.lesson.running; }, 120));
  const lesson::StepOutcome* o = c.snapshot().lesson.outcome(0);
  ASSERT_NE(o, nullptr) << c.snapshot().lesson.run_error;
  EXPECT_FALSE(o->checks.empty());
  for (const lesson::CheckResult& r : o->checks) EXPECT_TRUE(r.pass) << r.check->observable << ": " << r.detail();

  app.lesson.step_request = 1;  // next: a new step, results of the first kept
  c.update(app, 1);
  EXPECT_EQ(c.snapshot().lesson.step, 1);
  EXPECT_NE(c.snapshot().lesson.outcome(0), nullptr);
  app.lesson.open_request = -1;  // back to the list
  c.update(app, 2);
  EXPECT_EQ(c.snapshot().lesson.open_lesson(), nullptr);
}

// ---- StepMemory: a memory lesson step as the Memory panel draws it ----------------------------

constexpr int64_t kMiB = 1024 * 1024;

// Opens `lesson_id` at the step with `step_id` (fails the test when either is missing).
void open_step(LessonDriver& d, const std::string& lesson_id, const std::string& step_id) {
  d.load();
  const int index = d.find(lesson_id);
  ASSERT_GE(index, 0) << "lessons/" << lesson_id << " is missing";
  d.open(index);
  const int step = d.view().open_lesson()->step_index(step_id);
  ASSERT_GE(step, 0) << lesson_id << " has no step " << step_id;
  d.go_to(step);
}

// Lesson 5's first step: allocate 1, 5, 30 MiB, free the first and the last.
TEST(StepMemory, ReplaysTheAllocatorStepOnceTheMemoryStepHasRun) {
  LessonDriver d;
  ASSERT_NO_FATAL_FAILURE(open_step(d, "05-memory", "cache-keeps"));
  EXPECT_FALSE(current_step_memory(d.view()));  // not run yet: nothing to show
  d.run_current();
  d.wait();
  ASSERT_TRUE(d.view().run_error.empty()) << d.view().run_error;
  const std::optional<StepMemory> m = current_step_memory(d.view());
  ASSERT_TRUE(m);
  EXPECT_EQ(m->step_id, "cache-keeps");
  EXPECT_EQ(m->action, "memory");
  EXPECT_TRUE(m->error.empty());
  ASSERT_EQ(m->operations.size(), 5u);  // three allocations, two frees
  const int64_t reserved_mib[] = {2, 22, 52, 52, 52};
  const int64_t allocated_mib[] = {1, 6, 36, 35, 5};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(m->operations[i].reserved, reserved_mib[i] * kMiB) << m->operations[i].note;
    EXPECT_EQ(m->operations[i].allocated, allocated_mib[i] * kMiB) << m->operations[i].note;
  }
  EXPECT_EQ(m->operations[0].note.rfind("alloc[0]: ", 0), 0u) << m->operations[0].note;
  EXPECT_EQ(m->operations[3].note.rfind("free[0]: ", 0), 0u) << m->operations[3].note;
  EXPECT_EQ(m->context, 400 * kMiB);
  EXPECT_EQ(m->smi_used, m->context + m->reserved());
}

TEST(StepMemory, EndsWithWhatNvidiaSmiShowsAfterEmptyCache) {
  LessonDriver d;
  ASSERT_NO_FATAL_FAILURE(open_step(d, "05-memory", "what-smi-shows"));
  d.run_current();
  d.wait();
  const std::optional<StepMemory> m = current_step_memory(d.view());
  ASSERT_TRUE(m) << d.view().run_error;
  ASSERT_EQ(m->operations.size(), 6u);
  EXPECT_EQ(m->operations.back().note.rfind("empty_cache", 0), 0u) << m->operations.back().note;
  EXPECT_EQ(m->reserved(), 20 * kMiB);
  EXPECT_EQ(m->allocated(), 5 * kMiB);
  EXPECT_EQ(m->smi_used, 420 * kMiB);
}

// A machine story carries nvidia-smi per GPU (contexts and totals), not per-process counters.
TEST(StepMemory, ShowsNvidiaSmiPerGpuForAMachineStep) {
  LessonDriver d;
  ASSERT_NO_FATAL_FAILURE(open_step(d, "07-two-jobs", "both-running"));
  d.run_current();
  d.wait();
  const std::optional<StepMemory> m = current_step_memory(d.view());
  ASSERT_TRUE(m) << d.view().run_error;
  EXPECT_EQ(m->action, "machine");
  EXPECT_TRUE(m->operations.empty());
  ASSERT_EQ(m->gpus.size(), 4u);
  const int64_t used[] = {486539264, 465567744, 559939584, 488636416};  // the lesson's own check
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(m->gpus[i].index, static_cast<int>(i));
    EXPECT_EQ(m->gpus[i].used, used[i]);
    EXPECT_EQ(m->gpus[i].context, 400 * kMiB);
    EXPECT_EQ(m->gpus[i].processes, 1);
  }
}

TEST(StepMemory, IsAbsentForOtherActions) {
  lesson::Step step;
  step.action = "train";
  lesson::StepOutcome outcome;
  outcome.observables["smi_used"] = lesson::Value::of_ints(std::vector<int64_t>{1, 2});
  EXPECT_FALSE(step_memory(step, outcome));
}

// An out-of-memory replay keeps the operations before the error and says why it stopped.
TEST(StepMemory, KeepsTheOperationsBeforeAnOutOfMemoryError) {
  lesson::Step step;
  step.id = "too-big";
  step.action = "memory";
  lesson::StepOutcome outcome;
  lesson::Observables& o = outcome.observables;
  o["error"] = lesson::Value::of_string("CUDA out of memory.");
  o["context"] = lesson::Value::of_int(400 * kMiB);
  o["notes"] = lesson::Value::of_strings({"alloc[0]: new segment"});
  o["allocated_steps"] = lesson::Value::of_ints(std::vector<int64_t>{7 * 1024 * kMiB});
  o["reserved_steps"] = lesson::Value::of_ints(std::vector<int64_t>{7 * 1024 * kMiB});
  const std::optional<StepMemory> m = step_memory(step, outcome);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->operations.size(), 1u);
  EXPECT_EQ(m->error, "CUDA out of memory.");
  EXPECT_EQ(m->smi_used, 400 * kMiB + 7 * 1024 * kMiB);  // no smi_used observable after an error
}

}  // namespace
}  // namespace furnace::viz
