// DistributedDataParallel in the visualizer: DDP's bucket rule for the reference MLP, the step
// flow of a DDP step (every rank its own h2d, forward, loss, backward; one all-reduce stage per
// bucket; no scatter, replicate, gather or reduce), the comm stream's name in the Timeline, and a
// real `--parallel ddp` run through the Controller and through train() with the figures the
// runtime's own DdpReport gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "controller.h"
#include "ddp_flow.h"
#include "fake_run.h"
#include "frames_until.h"
#include "live_feed.h"
#include "model.h"
#include "step_flow.h"

namespace furnace::viz {
namespace {

std::vector<std::string> stage_names(const std::vector<Stage>& stages) {
  std::vector<std::string> out;
  for (const Stage& s : stages) out.push_back(s.name);
  return out;
}

TEST(DdpFlow, BucketsFollowDdpsRuleForTheReferenceMlp) {
  // Rebuilt: the last layers' gradients first, a bucket closed once it reaches 1 MiB, then 25 MB.
  EXPECT_EQ(ddp_bucket_params({512, 512}, 25, true),
            (std::vector<std::vector<std::string>>{{"4.bias", "4.weight", "2.bias", "2.weight"}, {"0.bias", "0.weight"}}));
  // Iteration 1: one bucket, every parameter in reverse order.
  EXPECT_EQ(ddp_bucket_params({512, 512}, 25, false),
            (std::vector<std::vector<std::string>>{{"4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight"}}));
}

TEST(DdpFlow, AStepHasEveryRanksPhasesAndOneAllReduceStagePerBucket) {
  SnapshotBuilder b = testing::fake_ddp_run(3);
  const Snapshot& s = b.snapshot();
  ASSERT_EQ(s.steps.size(), 3u);  // the ranks' interleaved events make three steps, no fragments
  const StepPhases& step = s.steps.back();
  EXPECT_EQ(step.step, 2);
  EXPECT_EQ(step_devices(step), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  const std::vector<Stage> stages = build_stages(step);
  EXPECT_EQ(stage_names(stages), (std::vector<std::string>{"h2d", "forward", "loss", "backward", "all_reduce",
                                                           "all_reduce", "optimizer"}));
  for (const Stage& st : stages) {
    EXPECT_EQ(st.spans.size(), 8u) << st.name << ": every rank";
    EXPECT_NE(st.kind, StageKind::scatter);
    EXPECT_NE(st.kind, StageKind::replicate);
    EXPECT_NE(st.kind, StageKind::gather);
    EXPECT_NE(st.kind, StageKind::reduce);
  }
  EXPECT_TRUE(stages[4].overlapped);
  EXPECT_EQ(stages[4].repeat, 1);
  EXPECT_EQ(stages[5].repeat, 2);
  EXPECT_EQ(stages[4].spans[0].copy_bytes, 1071144u);
  EXPECT_EQ(stages[5].spans[0].copy_bytes, 1607680u);
  EXPECT_EQ(stages[0].spans[0].copy_bytes, 32u * (784 * 4 + 4));  // batch / world rows, labels too
  EXPECT_FLOAT_EQ(step.loss, static_cast<float>(2.3 * std::exp(-0.02)));  // rank 0's, as printed

  const DdpStepFigures f = ddp_step_figures(step, {512, 512}, 25);
  EXPECT_EQ(f.world, 8);
  ASSERT_EQ(f.buckets.size(), 2u);
  EXPECT_EQ(f.buckets[0].params, (std::vector<std::string>{"4.bias", "4.weight", "2.bias", "2.weight"}));
  EXPECT_EQ(f.buckets[1].params, (std::vector<std::string>{"0.bias", "0.weight"}));
  EXPECT_EQ(f.bytes, 2678824u);
  EXPECT_EQ(f.sent_bytes, 2678824u * 2 * 7 / 8);
  EXPECT_NEAR(f.comm_s, 42e-6, 1e-12);
  EXPECT_NEAR(f.exposed_s, 30e-6, 1e-12);  // the second bucket: all of it after the compute stream
  EXPECT_NEAR(f.hidden_share, 12.0 / 42.0, 1e-9);
  EXPECT_NEAR(f.buckets[0].ready, 20.0 / 71.0, 1e-9);

  // A wrong MLP gives other bytes: the figures keep the bytes and name no gradients.
  const DdpStepFigures other = ddp_step_figures(step, {256}, 25);
  ASSERT_EQ(other.buckets.size(), 2u);
  EXPECT_TRUE(other.buckets[0].params.empty());
}

TEST(DdpFlow, CaptionsSayWhatDdpDoes) {
  EXPECT_NE(std::string(stage_caption(StageKind::loss, FlowMode::dp)).find("gathered"), std::string::npos);
  EXPECT_EQ(std::string(stage_caption(StageKind::loss, FlowMode::single)).find("gathered"), std::string::npos);
  EXPECT_EQ(std::string(stage_caption(StageKind::loss, FlowMode::ddp)).find("gathered"), std::string::npos);
  EXPECT_NE(std::string(stage_caption(StageKind::all_reduce, FlowMode::ddp)).find("ring"), std::string::npos);
  EXPECT_EQ(flow_mode("ddp"), FlowMode::ddp);
  EXPECT_EQ(flow_mode("dp"), FlowMode::dp);
  EXPECT_EQ(flow_mode("none"), FlowMode::single);
}

TEST(DdpFlow, TheCommunicationStreamIsNamedComm) {
  SnapshotBuilder b = testing::fake_ddp_run(1);
  std::vector<std::string> labels;
  for (const TimelineTrack& t : b.snapshot().timeline.tracks) labels.push_back(t.label);
  EXPECT_NE(std::find(labels.begin(), labels.end(), "cuda:0 comm"), labels.end());
  EXPECT_NE(std::find(labels.begin(), labels.end(), "cuda:7 comm"), labels.end());
  EXPECT_EQ(std::find(labels.begin(), labels.end(), "cuda:0 stream 1"), labels.end());
}

// ---- real runs ----------------------------------------------------------------------------------

Scenario ddp_scenario() {
  Scenario sc;
  sc.topology = "dgx-h100";
  sc.data_dir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  sc.parallel = "ddp";
  sc.batch = 256;  // 32 rows a rank
  sc.evaluate = false;
  return sc;
}

// The figures the step flow reads from the trace are the runtime's own: the buckets' bytes, and
// over the run the all-reduce time per rank, the exposed part and the hidden share of DdpReport.
TEST(DdpFlow, AgreesWithTheRunsDdpReport) {
  Scenario sc = ddp_scenario();
  sc.max_steps = 4;
  LiveFeed feed;
  TraceBus bus;
  bus.subscribe([&](const TraceEvent& e) { feed.on_event(e); });
  bus.subscribe_process([&](const ProcessRecord& p) { feed.on_process(p); });
  RunStatus status;
  status.parallel = "ddp";
  status.hidden = sc.hidden;
  feed.begin_run("sim", status);
  const TrainResult r = train(sc, bus, [&](const Progress& p) { feed.on_progress(p); });
  ASSERT_TRUE(r.ddp.has_value());
  SnapshotBuilder b;
  b.reset(load_topology("dgx-h100"), "sim");
  FeedDelta delta;
  feed.pull(delta);
  b.ingest(delta, 0);
  const Snapshot& s = b.snapshot();
  ASSERT_EQ(s.steps.size(), 4u);
  double comm = 0, exposed = 0;
  for (const StepPhases& step : s.steps) {
    const DdpStepFigures f = ddp_step_figures(step, sc.hidden, sc.bucket_cap_mb);
    EXPECT_EQ(f.world, 8);
    comm += f.comm_s;
    exposed += f.exposed_s;
  }
  const DdpStepFigures last = ddp_step_figures(s.steps.back(), sc.hidden, sc.bucket_cap_mb);
  ASSERT_EQ(last.buckets.size(), r.ddp->bucket_bytes.size());
  for (size_t i = 0; i < last.buckets.size(); ++i) EXPECT_EQ(last.buckets[i].bytes, r.ddp->bucket_bytes[i]);
  EXPECT_EQ(r.ddp->bucket_bytes, (std::vector<uint64_t>{1071144, 1607680}));
  EXPECT_FALSE(last.buckets[0].params.empty());
  // Iteration 1: one bucket of every gradient.
  EXPECT_EQ(ddp_step_figures(s.steps.front(), sc.hidden, sc.bucket_cap_mb).buckets.size(), 1u);
  double report_comm = 0, report_exposed = 0;
  for (const DdpRankReport& rank : r.ddp->ranks) {
    report_comm += rank.comm_s / static_cast<double>(r.ddp->ranks.size());
    report_exposed += rank.exposed_s / static_cast<double>(r.ddp->ranks.size());
  }
  EXPECT_NEAR(comm / 4, report_comm, 1e-9 * report_comm + 1e-15);
  EXPECT_NEAR(exposed / 4, report_exposed, 1e-9 * report_comm + 1e-15);
  EXPECT_NEAR(comm > 0 ? 1 - exposed / comm : 0, r.ddp->hidden_share, 1e-9);
  EXPECT_GT(report_comm, 0);
  for (const StepPhases& step : s.steps)
    for (const Stage& st : build_stages(step)) EXPECT_NE(st.kind, StageKind::scatter);
}

TEST(Controller, TrainsDistributedDataParallelLiveWithEqualGpus) {
  AppState app;
  app.controls.scenario = ddp_scenario();
  app.controls.scenario.epochs = 20;
  app.controls.parallel = "ddp";
  app.controls.step_delay_ms = 1;
  EXPECT_NO_THROW(scenario_from_controls(app.controls));
  Controller c(app);
  ASSERT_TRUE(frames_until(c, app, [](const Snapshot& s) { return s.steps.size() >= 3; })) << c.snapshot().run.message;
  const Snapshot& s = c.snapshot();
  EXPECT_EQ(s.run.parallel, "ddp");
  EXPECT_NE(s.run.scenario.find("DistributedDataParallel"), std::string::npos);
  const StepPhases& step = s.steps.back();
  EXPECT_EQ(step_devices(step).size(), 8u);
  const std::vector<std::string> names = stage_names(build_stages(step));
  EXPECT_EQ(std::count(names.begin(), names.end(), "all_reduce"), 2);
  for (const char* dp_only : {"scatter", "replicate", "gather", "reduce"})
    EXPECT_EQ(std::find(names.begin(), names.end(), dp_only), names.end()) << dp_only;
  // Every rank's GPU is used, and holds the same: its model, gradients, buckets, momentum.
  for (int d = 0; d < 8; ++d) {
    EXPECT_TRUE(s.devices[static_cast<size_t>(d)].used) << d;
    EXPECT_EQ(s.devices[static_cast<size_t>(d)].peak_allocated, s.devices[0].peak_allocated) << d;
  }
  EXPECT_GT(s.devices[0].peak_allocated, 0);
}

// Every panel a lesson step may name opens a panel; the Step flow is "step_flow" there, never
// "pipeline" (pipeline parallelism in this field).
TEST(LessonPanels, EveryNameALessonMayUseOpensAPanel) {
  for (const std::string& name : lesson::panels()) EXPECT_TRUE(parse_panel(name).has_value()) << name;
  EXPECT_EQ(parse_panel("step_flow"), PanelId::step_flow);
  EXPECT_FALSE(parse_panel("pipeline").has_value());
}

TEST(Controller, LessonThirteensDdpStepsSetUpADdpRun) {
  AppState app;
  Controller c(app, /*autostart=*/false);
  const int index = c.lessons().find("13-ddp");
  ASSERT_GE(index, 0);
  app.lesson.open_request = index;
  app.lesson.step_request = 1;  // "ddp-even": DDP on four GPUs
  c.update(app, 0);
  EXPECT_EQ(app.controls.parallel, "ddp");
  EXPECT_NO_THROW(scenario_from_controls(app.controls));
}

}  // namespace
}  // namespace furnace::viz
