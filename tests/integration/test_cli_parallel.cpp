// DataParallel from the command line, as a user runs it: `furnace scatter` and its JSON contract,
// `furnace train --parallel dp` (the per-device breakdown, memory on every device, a trace whose
// tracks nest), PyTorch's errors and warnings on stderr, and `furnace dp-loss-trap`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "integration/cli_harness.h"  // defines: CliHarness, CliRun

namespace {

namespace fs = std::filesystem;
using furnace::cli_test::CliRun;
using nlohmann::json;

class CliParallel : public furnace::cli_test::CliHarness {
 protected:
  std::string train(const std::string& extra) {
    return "train --data " + std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist --epochs 1 --steps 3 --no-eval --quiet " + extra;
  }
};

const char* kImbalance =
    "UserWarning: \n"
    "    There is an imbalance between your GPUs. You may want to exclude GPU 1 which\n"
    "    has less than 75% of the memory or cores of GPU 0. You can do so by setting\n"
    "    the device_ids argument to DataParallel, or by setting the CUDA_VISIBLE_DEVICES\n"
    "    environment variable.\n";

TEST_F(CliParallel, ScatterJsonContract) {
  struct Row {
    int batch;
    std::vector<int> rows;
  };
  for (const Row& row : {Row{10, {3, 3, 3, 1}}, Row{6, {2, 2, 2}}, Row{3, {1, 1, 1}}, Row{0, {0, 0, 0, 0}}}) {
    CliRun r = furnace("scatter --batch " + std::to_string(row.batch) + " --topology workstation-4x3090 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = r.last_json();
    ASSERT_EQ(j["chunks"].size(), row.rows.size()) << row.batch;
    for (size_t i = 0; i < row.rows.size(); ++i) {
      EXPECT_EQ(j["chunks"][i]["device"], static_cast<int>(i));
      EXPECT_EQ(j["chunks"][i]["rows"], row.rows[i]);
    }
    EXPECT_EQ(j["replicas"], row.rows.size());
  }
  // device_ids are relative to the visible devices, and their order is the chunks' order.
  CliRun r = furnace("scatter --batch 5 --device-ids 2,0 --topology workstation-4x3090 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.last_json()["chunks"], json::parse(R"([{"device":2,"rows":3},{"device":0,"rows":2}])"));
}

TEST_F(CliParallel, ScatterExplainsSmallBatchesAndTheGlobalBatch) {
  CliRun r = furnace("scatter --batch 3 --topology workstation-4x3090");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("the batch of 3 rows is smaller than the 4 devices: only 3 replicas run; cuda:3 gets nothing and idles"));
  // Plural: several idle devices "get nothing and idle".
  r = furnace("scatter --batch 9 --topology dgx-h100 --device-ids 0,1,2,3,4,5,6,7");
  EXPECT_THAT(r.out, ::testing::HasSubstr("cuda:5, cuda:6, cuda:7 get nothing and idle\n"));
  // The sizes are arithmetic: a batch of 2^31 rows (8 GiB as floats) answers at once.
  r = furnace("scatter --batch 2147483648 --topology workstation-4x3090 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.last_json()["chunks"][3]["rows"], 536870912);
  r = furnace("scatter --batch 256 --topology workstation-4x3090");
  EXPECT_THAT(r.out, ::testing::HasSubstr("global batch 256 = 64 per GPU x 4 GPUs"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("global batch = per-GPU batch x GPUs"));
}

TEST_F(CliParallel, PyTorchsErrorsOnOneLine) {
  expect_one_line_error("scatter --batch 8 --device-ids 0,7 --topology workstation-4x3090", "Invalid device id (");
  expect_one_line_error("scatter --batch 8 --device-ids '' --topology workstation-4x3090", "list index out of range");
  expect_one_line_error("scatter --batch 8 --device-ids 0,x", "--device-ids: '0,x' is not a comma-separated list");
  expect_one_line_error(train("--topology workstation-4x3090 --parallel dp --device 1 --device-ids 0,1"),
                        "module must have its parameters and buffers on device cuda:0 (device_ids[0]) but "
                        "found one of them on device: cuda:1");
  expect_one_line_error(train("--topology workstation-4x3090 --parallel dp --device-ids 0,9"), "Invalid device id");
  // Physical numbers inside a masked process: DataParallel's constructor refuses them before the
  // model moves to device_ids[0] (not "invalid device ordinal 2").
  expect_one_line_error(train("--topology workstation-4x3090 --visible 2,3 --parallel dp --device-ids 2,3"),
                        "Invalid device id (device_ids [2, 3]; process 4001 sees 2 of the 4 GPUs");
  expect_one_line_error(train("--device-ids 0,1"), "--device-ids needs --parallel dp");
  expect_one_line_error(train("--parallel fsdp"), "--parallel must be none, dp or ddp (got 'fsdp')");
}

TEST_F(CliParallel, TrainDpJsonSplitsEachDevicesTimeAndShowsEveryDevicesMemory) {
  const fs::path trace = dir_ / "dp.json";
  CliRun r = furnace(train("--topology workstation-4x3090 --parallel dp --json --trace " + trace.string()));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("UserWarning"), std::string::npos) << r.err;  // four identical GPUs
  const json j = r.last_json();
  const json& dp = j["dp"];
  EXPECT_EQ(dp["device_ids"], json::parse("[0,1,2,3]"));
  EXPECT_EQ(dp["output_device"], 0);
  EXPECT_EQ(dp["chunks"], json::parse("[64,64,64,64]"));
  ASSERT_EQ(dp["per_device"].size(), 4u);
  for (const char* key : {"scatter_s", "replicate_s", "compute_s", "gather_s", "reduce_s", "optimizer_s", "busy_s", "idle_s"})
    EXPECT_TRUE(dp["per_device"][0].contains(key)) << key;
  // PCIe, no peer-to-peer: every copy to or from GPU 0 holds its stream. GPU 0 is the bottleneck.
  const double gpu0 = dp["per_device"][0]["busy_s"], gpu1 = dp["per_device"][1]["busy_s"];
  EXPECT_GT(gpu0, 2.0 * gpu1);
  EXPECT_GT(dp["per_device"][0]["replicate_s"].get<double>(), 2.5 * dp["per_device"][1]["replicate_s"].get<double>());
  EXPECT_EQ(dp["per_device"][1]["optimizer_s"], 0.0);  // the optimizer runs on device_ids[0] only
  EXPECT_NEAR(dp["per_device"][0]["idle_s"].get<double>(), 0.0, 1e-9);
  // Memory on every device; GPU 0 holds the master parameters, the summed gradients, momentum,
  // the gathered output and the loss.
  ASSERT_EQ(j["memory"].size(), 4u);
  for (int d = 1; d < 4; ++d)
    EXPECT_GT(j["memory"][0]["peak_allocated_bytes"].get<uint64_t>(), j["memory"][d]["peak_allocated_bytes"].get<uint64_t>());
  EXPECT_GT(j["memory"][3]["peak_allocated_bytes"].get<uint64_t>(), 2681896u);  // its replica

  // The trace: a process per device, every DataParallel phase on each, and tracks that nest.
  std::ifstream f(trace);
  const json doc = json::parse(f);
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  std::map<int, std::set<std::string>> phases;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    tracks[{e["pid"], e["tid"]}].emplace_back(e["ts"], e["ts"].get<double>() + e["dur"].get<double>());
    if (e["cat"] == "phase") phases[e["pid"]].insert(e["name"]);
  }
  for (int d = 0; d < 4; ++d)
    for (const char* p : {"scatter", "replicate", "forward", "gather", "gather_backward", "backward", "reduce"})
      EXPECT_TRUE(phases[d].count(p)) << "cuda:" << d << " has no " << p << " phase";
  EXPECT_TRUE(phases[0].count("loss") && phases[0].count("optimizer"));
  EXPECT_FALSE(phases[1].count("optimizer"));
  for (auto& [track, spans] : tracks) {
    std::sort(spans.begin(), spans.end());
    std::vector<double> open_ends;
    for (const auto& [b, e] : spans) {
      while (!open_ends.empty() && open_ends.back() <= b + 1e-9) open_ends.pop_back();
      if (!open_ends.empty()) EXPECT_LE(e, open_ends.back() + 1e-9) << "track " << track.first << "/" << track.second << " overlaps at ts " << b;
      open_ends.push_back(e);
    }
  }
}

TEST_F(CliParallel, NvlinkMakesGpu0LessOfABottleneckThanPcie) {
  auto ratio = [&](const std::string& topology) {
    CliRun r = furnace(train("--topology " + topology + " --parallel dp --json"));
    EXPECT_EQ(r.status, 0) << r.err;
    const json j = r.last_json();
    const json& per = j["dp"]["per_device"];
    double others = 0;
    for (size_t d = 1; d < per.size(); ++d) others += per[d]["busy_s"].get<double>();
    return per[0]["busy_s"].get<double>() / (others / static_cast<double>(per.size() - 1));
  };
  const double pcie = ratio("workstation-4x3090");
  const double nvlink = ratio("dgx-h100 --device-ids 0,1,2,3");
  EXPECT_GT(pcie, 2.0);
  EXPECT_LT(nvlink, pcie);
}

// furnace train prints the simulated GPU's samples/s beside the wall clock's, and under
// DataParallel its ratio to one GPU (device_ids[0] alone, the same batch): below 1 over PCIe
// for the reference MLP (lesson 12's 0.25x; its NVLink step shows a ratio above 1).
TEST_F(CliParallel, TrainComparesDataParallelWithOneGpu) {
  auto speedup = [&](const std::string& args) {
    CliRun r = furnace(train(args + " --parallel dp --json"));
    EXPECT_EQ(r.status, 0) << r.err;
    const json j = r.last_json();
    return j["modelled_samples_per_s"].get<double>() / j["dp"]["one_gpu_modelled_samples_per_s"].get<double>();
  };
  EXPECT_LT(speedup("--topology workstation-4x3090"), 0.5);
  EXPECT_GT(speedup("--topology workstation-4x3090"), 0.1);
  CliRun text = furnace(train("--topology workstation-4x3090 --parallel dp"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("  simulated GPU   "));
  EXPECT_THAT(text.out, ::testing::HasSubstr("x: DataParallel on 4 GPUs "));
  // The default leaves the host's loading off the modelled clock, and says so; with it on, the
  // line gives the wait instead.
  EXPECT_THAT(text.out, ::testing::HasSubstr("data loading    not on the modelled clock (--loading off)"));
  CliRun loading = furnace(train("--topology workstation-4x3090 --loading tensors"));
  EXPECT_EQ(loading.status, 0) << loading.err;
  EXPECT_THAT(loading.out, ::testing::Not(::testing::HasSubstr("not on the modelled clock")));
  EXPECT_THAT(loading.out, ::testing::HasSubstr("(--loading tensors); the GPU waited "));
}

TEST_F(CliParallel, TheMixedPairWarnsAsPyTorchDoes) {
  CliRun r = furnace(train("--topology mixed-3090-3060 --parallel dp --json"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, ::testing::HasSubstr(kImbalance));
  EXPECT_EQ(r.last_json()["dp"]["warnings"].size(), 1u);
  // Right under it, which GPUs its numbers are: cuda ordinals, the RTX 3090 first (CUDA's order).
  const std::string note =
      "The warning's GPU 1 and GPU 0 are device_ids entries, i.e. cuda:N: GPU 1 is cuda:1, NVIDIA "
      "GeForce RTX 3060 (nvidia-smi's GPU 0); GPU 0 is cuda:0, NVIDIA GeForce RTX 3090 (nvidia-smi's GPU 1). To "
      "leave cuda:1 out: device_ids=[0], or CUDA_VISIBLE_DEVICES=0 (CUDA's numbering: fastest first, not nvidia-smi's)";
  EXPECT_THAT(r.err, ::testing::HasSubstr(std::string(kImbalance) + "furnace note: " + note + "\n"));
  EXPECT_EQ(r.last_json()["dp"]["warning_notes"], json::array({note}));
}

TEST_F(CliParallel, DdpSaysWhatItsMemoryAndAccumulationDo) {
  // Rank 0 alone evaluates: its peak is higher, and the summary says why instead of "the same".
  const std::string ddp = "train --data " + std::string(FURNACE_TEST_DATA_DIR) +
                          "/fashion-mnist --epochs 1 --steps 3 --quiet --topology workstation-4x3090 --parallel ddp";
  CliRun r = furnace(ddp + " --accum 4");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("every GPU holds the same for training: no GPU 0 bottleneck (rank 0's peak is "));
  EXPECT_THAT(r.out, ::testing::HasSubstr("it alone evaluates the test set at the end"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("--accum 4: the first 3 micro-batches of each step run under model.no_sync()"));
  r = furnace(ddp + " --no-eval");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("every GPU holds the same: no GPU 0 bottleneck\n"));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("no_sync")));
}

TEST_F(CliParallel, AnEmptyValueAfterEqualsIsAnEmptyList) {
  // `--device-ids=` is device_ids=[] (PyTorch: list index out of range), wherever it stands; it
  // used to take the next flag as its value ("--steps"), then reject that flag's value.
  for (const char* order : {"--device-ids= --steps 2", "--steps 2 --device-ids="}) {
    CliRun r = furnace("train --topology workstation-4x3090 --parallel dp " + std::string(order));
    EXPECT_EQ(r.status, 1) << order;
    EXPECT_THAT(r.err, ::testing::StartsWith("furnace: error: list index out of range (device_ids []")) << order;
  }
  // A flag's `--name=` stays CLI11's: it sets the flag (an empty value would be an extra argument).
  const CliRun r = furnace("train --data " + std::string(FURNACE_TEST_DATA_DIR) +
                           "/fashion-mnist --quiet= --steps 1 --no-eval --json");
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(CliParallel, OneDeviceIsTheShortcutAndSaysSo) {
  CliRun r = furnace(train("--topology workstation-4x3090 --parallel dp --device-ids 2 --json"));
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = r.last_json();
  EXPECT_THAT(j["dp"]["notes"][0].get<std::string>(), ::testing::StartsWith("one device: DataParallel's single-device shortcut"));
  EXPECT_EQ(j["dp"]["per_device"][0]["replicate_s"], 0.0);
  EXPECT_GT(j["memory"][2]["peak_allocated_bytes"].get<uint64_t>(), 0u);  // model.cuda(2)
  EXPECT_EQ(j["memory"][0]["peak_allocated_bytes"], 0u);
}

TEST_F(CliParallel, LossTrapWithOneDeviceIdGathersNothing) {
  CliRun r = furnace("dp-loss-trap --device-ids 2 --batch 5 --topology workstation-4x3090 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");  // no scalar-gather warning
  EXPECT_EQ(r.last_json()["unequal"]["loss_shape"], json::array());  // a 0-dim loss
  r = furnace("dp-loss-trap --device-ids 2 --batch 5 --topology workstation-4x3090");
  EXPECT_THAT(r.out, ::testing::HasSubstr("on 1 GPU of workstation-4x3090"));
  EXPECT_THAT(r.out, ::testing::HasSubstr("a 0-dim tensor"));
  EXPECT_THAT(r.out, ::testing::Not(::testing::HasSubstr("gather returns them as a vector")));
}

TEST_F(CliParallel, LossTrapIsReproducible) {
  CliRun r = furnace("dp-loss-trap --batch 10 --topology workstation-4x3090 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "UserWarning: Was asked to gather along dimension 0, but all input tensors were scalars; "
                   "will instead unsqueeze and return a vector.\n");
  const json j = r.last_json();
  const json& u = j["unequal"];
  EXPECT_EQ(u["replicas"].size(), 4u);
  EXPECT_EQ(u["replicas"][3]["rows"], 1);
  EXPECT_GT(std::fabs(u["mean_of_means"].get<double>() - u["batch_mean"].get<double>()), 1e-4);
  EXPECT_NEAR(u["weighted_mean"].get<double>(), u["batch_mean"].get<double>(), 1e-5);
  EXPECT_NEAR(u["replicas"][3]["row_weight_trap"].get<double>(), 0.25, 1e-12);
  const json& e = j["equal"];
  EXPECT_NEAR(e["mean_of_means"].get<double>(), e["batch_mean"].get<double>(), 1e-6);
  CliRun text = furnace("dp-loss-trap");
  EXPECT_THAT(text.out, ::testing::HasSubstr("loss.mean() of the gathered vector"));
}

}  // namespace

namespace {

// `furnace train --parallel ddp --json`: the ranks, PyTorch's buckets, equal memory on every GPU.
TEST_F(CliParallel, TrainDdpJsonShowsEveryRankAndTheBuckets) {
  CliRun r = furnace(train("--topology dgx-h100 --parallel ddp --nproc 4 --json"));
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = r.last_json();
  const json& ddp = j["ddp"];
  EXPECT_EQ(ddp["world"], 4);
  EXPECT_EQ(ddp["rank_batch"], 64);
  EXPECT_EQ(ddp["bucket_bytes"], json::parse("[1071144,1607680]"));
  ASSERT_EQ(ddp["ranks"].size(), 4u);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(ddp["ranks"][k]["physical"], k);
    EXPECT_EQ(ddp["ranks"][k]["allocated_bytes"], ddp["ranks"][0]["allocated_bytes"]);
  }
  EXPECT_GT(ddp["hidden_share"].get<double>(), 0.0);  // NVLink: part of the all-reduce hides behind backward
  EXPECT_GT(ddp["one_gpu_modelled_samples_per_s"].get<double>(), 0.0);
}

// `furnace compare` alone compares on a machine with several GPUs (train's default laptop has one).
TEST_F(CliParallel, CompareWithoutATopologyRunsOnAMultiGpuMachine) {
  CliRun r = furnace("compare --data " + std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist --steps 2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = r.last_json();
  EXPECT_EQ(j["topology"], "workstation-4x3090");
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["gpus"].size(), 4u);
}

// `furnace compare dp ddp`: DataParallel's GPU 0 is the busiest and the fullest; under DDP every GPU
// is alike, and the DDP step is the shorter on this PCIe machine.
TEST_F(CliParallel, CompareDpAndDdpSideBySide) {
  CliRun r = furnace("compare --data " + std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist --topology workstation-4x3090 --steps 3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = r.last_json();
  ASSERT_EQ(j["runs"].size(), 2u);
  const json& dp = j["runs"][0];
  const json& ddp = j["runs"][1];
  EXPECT_EQ(dp["mode"], "dp");
  EXPECT_EQ(ddp["mode"], "ddp");
  ASSERT_EQ(dp["gpus"].size(), 4u);
  ASSERT_EQ(ddp["gpus"].size(), 4u);
  for (int d = 1; d < 4; ++d) {
    EXPECT_GT(dp["gpus"][0]["busy_s"].get<double>(), dp["gpus"][d]["busy_s"].get<double>());
    EXPECT_GT(dp["gpus"][0]["peak_allocated_bytes"].get<uint64_t>(), dp["gpus"][d]["peak_allocated_bytes"].get<uint64_t>());
    EXPECT_EQ(ddp["gpus"][0]["allocated_bytes"], ddp["gpus"][d]["allocated_bytes"]);
  }
  EXPECT_LT(ddp["step_s"].get<double>(), dp["step_s"].get<double>());
  EXPECT_GT(ddp["gpu_bytes_per_step"].get<uint64_t>(), 0u);
  EXPECT_GT(dp["gpu_bytes_per_step"].get<uint64_t>(), 0u);
  CliRun bad = furnace("compare dp fsdp");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.err.find("'fsdp' is not a mode (none, dp or ddp)"), std::string::npos) << bad.err;
}

}  // namespace
