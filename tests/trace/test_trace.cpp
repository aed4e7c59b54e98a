// TraceBus and the Chrome trace writer: structure, one process per device, one track per stream,
// perfect nesting on every track, counters for memory; the run's process record beside the events.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "furnace/trace.h"
#include "furnace/train.h"  // defines: Scenario, TrainingRun

namespace furnace {
namespace {

TEST(TraceBus, SubscribersSeeEventsUntilUnsubscribed) {
  TraceBus bus;
  EXPECT_FALSE(bus.active());
  int seen = 0;
  int id = bus.subscribe([&](const TraceEvent&) { ++seen; });
  EXPECT_TRUE(bus.active());
  bus.emit(TraceEvent{});
  bus.unsubscribe(id);
  bus.emit(TraceEvent{});
  EXPECT_EQ(seen, 1);
  EXPECT_FALSE(bus.active());
}

TEST(TraceBus, ProcessRecordsGoToTheirOwnSubscribersOnly) {
  TraceBus bus;
  int events = 0, processes = 0;
  const int e = bus.subscribe([&](const TraceEvent&) { ++events; });
  const int p = bus.subscribe_process([&](const ProcessRecord& r) {
    ++processes;
    EXPECT_EQ(r.topology.name, "t");
  });
  ProcessRecord r;
  r.topology.name = "t";
  bus.publish(r);
  EXPECT_EQ(events, 0);
  EXPECT_EQ(processes, 1);
  bus.unsubscribe(p);
  bus.publish(r);
  EXPECT_EQ(processes, 1);
  bus.unsubscribe(e);
  EXPECT_FALSE(bus.active());
}

// The run publishes its own process once, at its first device use, before any device event: the
// machine it loaded and the CUDA_VISIBLE_DEVICES map fixed then. The Chrome trace never sees it.
TEST(TraceBus, ATrainingRunPublishesItsProcessOnceBeforeItsFirstDeviceEvent) {
  Scenario sc;
  sc.data_dir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  sc.topology = "workstation-4x3090";
  sc.hidden = {16};
  sc.batch = 100;
  sc.max_steps = 1;
  sc.evaluate = false;
  sc.env[kCudaVisibleDevices] = "2,1";
  TraceBus bus;
  ChromeTraceWriter writer(bus);
  std::vector<ProcessRecord> records;
  size_t events_before = 0;
  bus.subscribe_process([&](const ProcessRecord& r) {
    records.push_back(r);
    events_before = writer.event_count();
  });
  TrainingRun run(sc, bus);
  while (run.step()) {}
  run.finish();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(events_before, 0u);
  const ProcessRecord& r = records.front();
  EXPECT_EQ(r.topology.name, "workstation-4x3090");
  EXPECT_EQ(r.topology.gpus.size(), 4u);
  EXPECT_EQ(r.environment.at(kCudaVisibleDevices), "2,1");
  ASSERT_EQ(r.visibility.count(), 2);
  EXPECT_EQ(r.visibility.physical_index(0), 2);
  EXPECT_EQ(r.visibility.physical_index(1), 1);
  EXPECT_EQ(r.visibility.devices[0].entry, "2");
  EXPECT_GT(writer.event_count(), 0u);
  EXPECT_EQ(writer.to_json().find("workstation"), std::string::npos);
}

TEST(TraceBus, ClockDefaultsToZeroAndFollowsTheBackend) {
  TraceBus bus;
  EXPECT_EQ(bus.now(0), 0.0);
  bus.set_clock([](int d) { return 1.5 * d; });
  EXPECT_EQ(bus.now(2), 3.0);
}

TraceEvent kernel(int device, int stream, double start, double dur, const char* name) {
  TraceEvent e;
  e.kind = EventKind::kernel;
  e.name = name;
  e.device = device;
  e.stream = stream;
  e.start_s = start;
  e.dur_s = dur;
  return e;
}

TEST(ChromeTrace, LayoutAndBackToBackEventsDoNotOverlap) {
  TraceBus bus;
  ChromeTraceWriter w(bus);
  w.set_device_names({"GPU A", "GPU B"});
  // Back-to-back kernels whose boundaries are not exact in binary.
  double t = 0;
  for (int i = 0; i < 100; ++i) {
    const double dur = 1e-6 * (0.1 + 0.013 * i);
    bus.emit(kernel(0, 0, t, dur, "k"));
    t += dur;
  }
  bus.emit(kernel(1, 2, 0.0, 1e-3, "other"));
  TraceEvent a;
  a.kind = EventKind::alloc;
  a.device = 1;
  a.allocated = 512;
  a.reserved = 2 << 20;
  bus.emit(a);

  auto doc = nlohmann::json::parse(w.to_json());
  ASSERT_TRUE(doc.contains("traceEvents"));
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  int counters = 0, names = 0;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X") tracks[{e["pid"], e["tid"]}].emplace_back(e["ts"], e["dur"]);
    if (ph == "C") {
      ++counters;
      EXPECT_EQ(e["args"]["reserved"], 2 << 20);
    }
    if (ph == "M" && e["name"] == "process_name") {
      ++names;
      if (e["pid"] == 0) EXPECT_EQ(e["args"]["name"], "cuda:0 GPU A");
    }
  }
  EXPECT_EQ(counters, 1);
  EXPECT_EQ(names, 2);
  ASSERT_EQ(tracks.size(), 2u);
  const auto& track = tracks[{0, 0}];
  ASSERT_EQ(track.size(), 100u);
  for (size_t i = 1; i < track.size(); ++i)
    EXPECT_LE(track[i - 1].first + track[i - 1].second, track[i].first + 1e-9) << "overlap at " << i;
}

TEST(ChromeTrace, AStreamWithCollectivesIsNamedComm) {
  TraceBus bus;
  ChromeTraceWriter w(bus);
  bus.emit(kernel(0, 0, 0.0, 1e-6, "linear_backward"));
  bus.emit(kernel(0, 1, 0.0, 1e-6, "copy_bucket"));  // its first event is not the collective
  bus.emit(kernel(0, 1, 1e-6, 1e-6, "all_reduce"));
  bus.emit(kernel(1, 2, 0.0, 1e-6, "other"));
  std::map<std::pair<int, int>, std::string> names;
  const nlohmann::json doc = nlohmann::json::parse(w.to_json());
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name") names[{e["pid"], e["tid"]}] = e["args"]["name"];
  EXPECT_EQ((names[{0, 0}]), "stream 0");
  EXPECT_EQ((names[{0, 1}]), "comm");  // as the visualizer's live Timeline calls it
  EXPECT_EQ((names[{1, 2}]), "stream 2");
}

TEST(ChromeTrace, WriteFailsWithOneLine) {
  TraceBus bus;
  ChromeTraceWriter w(bus);
  try {
    w.write("/nonexistent-dir/x.json");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace furnace
