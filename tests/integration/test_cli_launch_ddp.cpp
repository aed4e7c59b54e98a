// DDP across processes as a user runs it: `furnace launch --nproc-per-node N -- furnace train
// --parallel ddp` (Gloo between the processes) gives the weights of the in-process simulated DDP
// for N = 2 and 4, and so do two "nodes" on this host (two launches, node ranks 0 and 1); a launch
// stopped and launched again with --resume ends with the straight launch's bits; only
// rank 0 speaks; a worker killed mid-run ends the others within seconds (not the timeout) with
// each one's last words, and rank 0's last checkpoint stays loadable; a store address nobody
// listens on is one line after --dist-timeout; Open MPI's variables name the rank; a launch with
// more processes than GPUs names the rank that failed. Every socket is on 127.0.0.0/8.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <cmath>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "furnace/checkpoint.h"  // defines: read_checkpoint
#include "furnace/launch_env.h"  // defines: pick_free_port
#include "integration/cli_harness.h"  // defines: CliHarness, CliRun, run_program
#include "integration/spawn.h"        // defines: spawn, wait_for

namespace {

using furnace::cli_test::CliRun;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

class CliLaunchDdp : public furnace::cli_test::CliHarness {
 protected:
  // The reference MLP on the committed slice, 8 optimizer steps, saved to `checkpoint`.
  std::string train_args(const std::string& checkpoint, const std::string& more = "") {
    return "train --parallel ddp --topology workstation-4x3090 --data " + slice() +
           " --epochs 1 --steps 8 --batch 64 --lr-schedule constant --checkpoint " + (dir_ / checkpoint).string() +
           " --json " + more;
  }
  CliRun launched(const std::string& launch_flags, const std::string& checkpoint, const std::string& more = "") {
    return furnace("launch " + launch_flags + " -- " + FURNACE_CLI + " " + train_args(checkpoint, more));
  }
  // The model of a checkpoint, and the largest difference between two of them (infinity where
  // either holds a NaN: a diverged run never matches).
  double max_weight_difference(const std::string& a, const std::string& b) {
    const furnace::Checkpoint ca = furnace::read_checkpoint((dir_ / a).string());
    const furnace::Checkpoint cb = furnace::read_checkpoint((dir_ / b).string());
    EXPECT_EQ(ca.model.size(), cb.model.size());
    double worst = 0;
    for (size_t t = 0; t < ca.model.size() && t < cb.model.size(); ++t) {
      EXPECT_EQ(ca.model[t].name, cb.model[t].name);
      EXPECT_EQ(ca.model[t].values.size(), cb.model[t].values.size());
      for (size_t i = 0; i < ca.model[t].values.size() && i < cb.model[t].values.size(); ++i) {
        const double diff = std::fabs(static_cast<double>(ca.model[t].values[i]) - cb.model[t].values[i]);
        worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
      }
    }
    return worst;
  }
  // Rank 0's JSON line in a launch's prefixed output.
  static nlohmann::json rank0_json(const CliRun& r) {
    const size_t at = r.out.rfind("[rank0]:");
    return nlohmann::json::parse(at == std::string::npos ? r.out : r.out.substr(at + 8));
  }
  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

// Gloo's ring adds the ranks' gradients in another order than the threads' rank order: the
// weights agree within fp32 reassociation (8 SGD steps of lr 0.1 on weights of size ~0.05).
constexpr double kTolerance = 1e-5;

// Each process resumes from rank 0's checkpoint (the per-rank TrainingRun restores it): a launch
// stopped at step 4 and launched again with --resume ends with the uninterrupted launch's bits.
TEST_F(CliLaunchDdp, EveryProcessResumesFromRankZerosCheckpoint) {
  const CliRun straight = launched("--nproc-per-node 2 --master-port 0", "straight.ckpt");
  ASSERT_EQ(straight.status, 0) << straight.out << straight.err;
  const CliRun first = launched("--nproc-per-node 2 --master-port 0", "run.ckpt", "--stop-at-step 4");
  ASSERT_EQ(first.status, 0) << first.out << first.err;
  std::filesystem::copy_file(dir_ / "run.ckpt", dir_ / "run4.ckpt");
  const CliRun second = furnace("launch --nproc-per-node 2 --master-port 0 -- " + std::string(FURNACE_CLI) +
                                " train --json --resume " + (dir_ / "run.ckpt").string());
  ASSERT_EQ(second.status, 0) << second.out << second.err;
  EXPECT_EQ(rank0_json(second)["checkpoint"]["resumed_from_step"], 4);
  EXPECT_EQ(max_weight_difference("straight.ckpt", "run.ckpt"), 0.0);
  // Launched on 4 processes, the 2-rank checkpoint's world gives way to the launcher's, as
  // --nproc 4 does in one process (it was refused as "--nproc 2 does not apply under a launcher").
  const CliRun wider = furnace("launch --nproc-per-node 4 --master-port 0 -- " + std::string(FURNACE_CLI) +
                               " train --json --resume " + (dir_ / "run4.ckpt").string());
  ASSERT_EQ(wider.status, 0) << wider.out << wider.err;
  EXPECT_THAT(wider.out, HasSubstr("resumed on 4 ranks from a checkpoint of 2 ranks"));
  EXPECT_LE(max_weight_difference("straight.ckpt", "run4.ckpt"), kTolerance);
}

TEST_F(CliLaunchDdp, ProcessesTrainTheWeightsOfInProcessDdp) {
  for (int n : {2, 4}) {
    const std::string tag = std::to_string(n);
    const CliRun procs = launched("--nproc-per-node " + tag + " --master-port 0", "procs" + tag + ".ckpt");
    ASSERT_EQ(procs.status, 0) << procs.out << procs.err;
    const CliRun threads = furnace(train_args("threads" + tag + ".ckpt", "--nproc " + tag));
    ASSERT_EQ(threads.status, 0) << threads.err;
    EXPECT_LE(max_weight_difference("procs" + tag + ".ckpt", "threads" + tag + ".ckpt"), kTolerance) << n;
    // Only rank 0 speaks: its JSON, with every rank's report in it.
    EXPECT_THAT(procs.out, Not(HasSubstr("[rank1]:"))) << procs.out;
    const nlohmann::json j = rank0_json(procs);
    const nlohmann::json t = threads.last_json();
    EXPECT_EQ(j["ddp"]["world"], n);
    EXPECT_EQ(j["ddp"]["ranks"].size(), static_cast<size_t>(n));
    EXPECT_EQ(j["steps"], t["steps"]);
    EXPECT_EQ(j["ddp"]["launcher"]["by"], "furnace launch");
    EXPECT_EQ(j["ddp"]["launcher"]["backend"], "gloo");
    EXPECT_FALSE(t["ddp"].contains("launcher")) << "the in-process ranks are threads";
    EXPECT_EQ(j["ddp"]["bucket_bytes"], t["ddp"]["bucket_bytes"]);
    // The modelled clock is the same machine's: the same step time.
    EXPECT_NEAR(j["modelled_step_s"].get<double>(), t["modelled_step_s"].get<double>(),
                1e-9 * t["modelled_step_s"].get<double>());
  }
}

TEST_F(CliLaunchDdp, OnlyRankZeroSpeaksAndSaysWhoStartedIt) {
  const CliRun r = furnace("launch --nproc-per-node 2 --master-port 0 -- " + std::string(FURNACE_CLI) +
                           " train --parallel ddp --topology workstation-4x3090 --data " + slice() + " --steps 2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank0]:  started by furnace launch: this process is rank 0 of 2 (LOCAL_RANK 0, node 0)"));
  EXPECT_THAT(r.out, HasSubstr("[rank0]:  test accuracy"));
  EXPECT_THAT(r.out + r.err, Not(HasSubstr("[rank1]:"))) << "rank 1 trains silently";
}

TEST_F(CliLaunchDdp, TwoNodesOnThisHostTrainAsTwoRanks) {
  const std::string port = std::to_string(furnace::pick_free_port("127.0.0.1"));
  auto node = [&](int k) {
    return std::async(std::launch::async, [&, k] {
      return furnace::cli_test::run_program(
          FURNACE_CLI,
          "launch --nnodes 2 --node-rank " + std::to_string(k) + " --nproc-per-node 1 --master-addr 127.0.0.1 "
          "--master-port " + port + " -- " + FURNACE_CLI + " " + train_args("node" + std::to_string(k) + ".ckpt"),
          "", dir_ / ("node" + std::to_string(k)), 300);
    });
  };
  std::filesystem::create_directories(dir_ / "node0");
  std::filesystem::create_directories(dir_ / "node1");
  auto n0 = node(0);
  auto n1 = node(1);
  const CliRun r0 = n0.get(), r1 = n1.get();
  ASSERT_EQ(r0.status, 0) << r0.out << r0.err;
  ASSERT_EQ(r1.status, 0) << r1.out << r1.err;
  EXPECT_EQ(rank0_json(r0)["ddp"]["launcher"]["nodes"], 2);
  EXPECT_EQ(r1.out, "") << "rank 1 (node 1) is silent";
  const CliRun threads = furnace(train_args("threads.ckpt", "--nproc 2"));
  ASSERT_EQ(threads.status, 0) << threads.err;
  EXPECT_LE(max_weight_difference("node0.ckpt", "threads.ckpt"), kTolerance);
}

TEST_F(CliLaunchDdp, AKilledWorkerEndsTheOthersAtOnceAndTheCheckpointStaysLoadable) {
  const std::string port = std::to_string(furnace::pick_free_port("127.0.0.1"));
  const std::string ckpt = (dir_ / "run.ckpt").string();
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    ::setenv("RANK", std::to_string(r).c_str(), 1);
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", port.c_str(), 1);
    pids.push_back(furnace::cli_test::spawn(
        {"train", "--parallel", "ddp", "--topology", "workstation-4x3090", "--data", slice(), "--epochs", "1000",
         "--batch", "64", "--checkpoint", ckpt, "--save-every", "5", "--dist-timeout", "60"},
        dir_ / ("rank" + std::to_string(r) + ".log")));
  }
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(v);
  // Wait until rank 0 has saved a checkpoint: the ranks are mid-run.
  const auto t_start = Clock::now();
  while (!std::filesystem::exists(ckpt) && seconds_since(t_start) < 60)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(std::filesystem::exists(ckpt)) << furnace::cli_test::slurp(dir_ / "rank0.log");
  ::kill(pids[1], SIGKILL);
  const auto t_kill = Clock::now();
  const int status0 = furnace::cli_test::wait_for(pids[0]);
  const double took = seconds_since(t_kill);
  EXPECT_EQ(furnace::cli_test::wait_for(pids[1]), 128 + SIGKILL);
  EXPECT_NE(status0, 0);
  EXPECT_LT(status0, 124) << "rank 0 crashed or was killed instead of failing";
  EXPECT_LT(took, 20.0) << "rank 0 waited for its 60 s collective timeout instead of noticing the dead peer";
  const std::string log0 = furnace::cli_test::slurp(dir_ / "rank0.log");
  EXPECT_THAT(log0, HasSubstr("rank 0: ProcessGroup (gloo): rank 0 lost its peers")) << log0;
  // The last checkpoint rank 0 wrote is whole (saves are atomic).
  EXPECT_NO_THROW(furnace::read_checkpoint(ckpt));
}

TEST_F(CliLaunchDdp, AStoreNobodyListensOnIsOneLineAfterTheTimeout) {
  // Rank 1 looks for rank 0's store on a loopback address and a port where nobody listens.
  const std::string port = std::to_string(furnace::pick_free_port("127.0.0.1"));
  const auto t0 = Clock::now();
  const CliRun r = expect_one_line_error(
      "train --parallel ddp --topology workstation-4x3090 --data " + slice() + " --steps 2 --dist-timeout 2",
      "127.0.0.3:" + port, "RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.3 MASTER_PORT=" + port);
  EXPECT_THAT(r.err, HasSubstr("rank 1: "));
  const double took = seconds_since(t0);
  EXPECT_GE(took, 1.9);
  EXPECT_LT(took, 30.0);
}

TEST_F(CliLaunchDdp, OpenMpisVariablesNameTheRank) {
  const std::string port = std::to_string(furnace::pick_free_port("127.0.0.1"));
  auto rank = [&](int r) {
    return std::async(std::launch::async, [&, r] {
      std::filesystem::create_directories(dir_ / ("mpi" + std::to_string(r)));
      return furnace::cli_test::run_program(
          FURNACE_CLI, train_args("mpi" + std::to_string(r) + ".ckpt"),
          "OMPI_COMM_WORLD_RANK=" + std::to_string(r) + " OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=" +
              std::to_string(r) + " OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_PORT=" + port,
          dir_ / ("mpi" + std::to_string(r)), 300);
    });
  };
  auto a = rank(0);
  auto b = rank(1);
  const CliRun r0 = a.get(), r1 = b.get();
  ASSERT_EQ(r0.status, 0) << r0.err;
  ASSERT_EQ(r1.status, 0) << r1.err;
  EXPECT_EQ(r0.last_json()["ddp"]["launcher"]["by"], "Open MPI");
  EXPECT_EQ(r0.last_json()["ddp"]["world"], 2);
  EXPECT_EQ(r1.out, "");
}

TEST_F(CliLaunchDdp, MoreProcessesThanGpusNamesTheRankThatFailed) {
  // laptop-4060 has one GPU: rank 1's torch.cuda.set_device(1) fails; launch names it.
  const CliRun r = furnace("launch --nproc-per-node 2 --master-port 0 -- " + std::string(FURNACE_CLI) +
                           " train --parallel ddp --topology laptop-4060 --data " + slice() +
                           " --steps 2 --dist-timeout 20");
  EXPECT_NE(r.status, 0);
  EXPECT_FALSE(r.crashed()) << r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr("rank 1: torch.cuda.set_device(1) (its LOCAL_RANK): the process sees 1 GPU"));
  EXPECT_THAT(r.out + r.err, HasSubstr("invalid device ordinal"));
}

TEST_F(CliLaunchDdp, NprocUnderALauncherIsRefused) {
  expect_one_line_error("train --parallel ddp --nproc 4 --topology workstation-4x3090 --steps 1",
                        "--nproc 4 does not apply under a launcher: torchrun started WORLD_SIZE=2 processes",
                        "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1");
}

}  // namespace
