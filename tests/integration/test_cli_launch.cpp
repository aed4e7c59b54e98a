// `furnace launch` (torchrun's agent) as a user runs it, with `sh -c` workers: torchrun's
// environment for each worker, the "[rankN]:" prefix, OMP_NUM_THREADS, a failing or killed worker
// stopping the others, signals to launch reaching the workers (and no process left behind), and
// bad input. Nothing here listens on a port except --master-port 0's probe, on 127.0.0.1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "integration/cli_harness.h"  // defines: CliHarness, CliRun, count_lines
#include "integration/spawn.h"        // defines: spawn, wait_for

namespace {

using furnace::cli_test::CliRun;
using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

class CliLaunch : public furnace::cli_test::CliHarness {
 protected:
  // `furnace launch <flags> -- sh -c '<script>'`; the script is in single quotes.
  CliRun launch(const std::string& flags, const std::string& script, const std::string& env = "-u OMP_NUM_THREADS") {
    return furnace("launch " + flags + " -- sh -c '" + script + "'", env);
  }

  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

const char* kContract =
    "echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE "
    "GROUP_RANK=$GROUP_RANK GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE ROLE_RANK=$ROLE_RANK ROLE_WORLD_SIZE=$ROLE_WORLD_SIZE "
    "MASTER=$MASTER_ADDR:$MASTER_PORT RESTARTS=$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS "
    "RUN_ID=$TORCHELASTIC_RUN_ID";

TEST_F(CliLaunch, GivesEachWorkerTorchrunsEnvironment) {
  // RANK from the shell is replaced, as torchrun replaces it.
  const CliRun r = launch("--nproc-per-node 2", kContract, "-u OMP_NUM_THREADS RANK=7");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank0]:RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 "
                               "GROUP_WORLD_SIZE=1 ROLE_RANK=0 ROLE_WORLD_SIZE=2 MASTER=127.0.0.1:29500 "
                               "RESTARTS=0/0 RUN_ID=none\n"));
  EXPECT_THAT(r.out, HasSubstr("[rank1]:RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 GROUP_RANK=0 "
                               "GROUP_WORLD_SIZE=1 ROLE_RANK=1 ROLE_WORLD_SIZE=2 MASTER=127.0.0.1:29500 "
                               "RESTARTS=0/0 RUN_ID=none\n"));
  EXPECT_EQ(furnace::cli_test::count_lines(r.out), 2) << r.out;
}

TEST_F(CliLaunch, SecondNodeCountsItsRanksAfterTheFirstNodes) {
  const CliRun r = launch("--nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 10.1.2.3 --master-port 29600 "
                          "--rdzv-id job7",
                          kContract);
  ASSERT_EQ(r.status, 0) << r.err;
  for (int local = 0; local < 2; ++local) {
    const std::string rank = std::to_string(2 + local);
    EXPECT_THAT(r.out, HasSubstr("[rank" + rank + "]:RANK=" + rank + " LOCAL_RANK=" + std::to_string(local) +
                                 " WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 GROUP_WORLD_SIZE=2 ROLE_RANK=" + rank +
                                 " ROLE_WORLD_SIZE=4 MASTER=10.1.2.3:29600 RESTARTS=0/0 RUN_ID=job7\n"));
  }
}

TEST_F(CliLaunch, PrefixesEveryLineOnItsOwnStream) {
  const CliRun r = launch("", "echo out; echo err >&2; echo; printf \"no newline\"");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[rank0]:out\n[rank0]:\n[rank0]:no newline\n");
  EXPECT_EQ(r.err, "[rank0]:err\n");
}

TEST_F(CliLaunch, NoPrefixPassesOutputThrough) {
  const CliRun r = launch("--no-prefix", "echo out; echo err >&2; printf tail");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "out\ntail");
  EXPECT_EQ(r.err, "err\n");
}

TEST_F(CliLaunch, LosesNoOutput) {
  const CliRun r = launch("--nproc-per-node 2", "seq 1 20000; seq 1 5000 >&2");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(furnace::cli_test::count_lines(r.out), 40000);
  EXPECT_THAT(r.out, HasSubstr("[rank0]:20000\n"));
  EXPECT_THAT(r.out, HasSubstr("[rank1]:19999\n"));
  EXPECT_THAT(r.err, HasSubstr("[rank1]:5000\n"));
}

TEST_F(CliLaunch, SetsOmpNumThreadsToOneWithAWarningUnlessSet) {
  const char* kWarning = "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default";
  CliRun r = launch("--nproc-per-node 2", "echo OMP=$OMP_NUM_THREADS");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank0]:OMP=1\n"));
  EXPECT_THAT(r.out, HasSubstr("[rank1]:OMP=1\n"));
  EXPECT_EQ(r.err.find(kWarning), r.err.rfind(kWarning)) << "the warning is printed once";
  EXPECT_THAT(r.err, HasSubstr(kWarning));

  r = launch("--nproc-per-node 2", "echo OMP=$OMP_NUM_THREADS", "OMP_NUM_THREADS=4");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[rank1]:OMP=4\n"));
  EXPECT_EQ(r.err, "");

  // One worker per node cannot overload it: torchrun leaves the variable alone then.
  r = launch("--nproc-per-node 1", "echo OMP=${OMP_NUM_THREADS-unset}");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[rank0]:OMP=unset\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(CliLaunch, MasterPortZeroPicksAFreePort) {
  const CliRun r = launch("--master-port 0", "echo $MASTER_PORT");
  ASSERT_EQ(r.status, 0) << r.err;
  const int port = std::atoi(r.out.substr(r.out.find(':') + 1).c_str());
  EXPECT_GT(port, 0) << r.out;
  EXPECT_LE(port, 65535) << r.out;
}

TEST_F(CliLaunch, FurnaceMeansThisFurnace) {
  const CliRun r = furnace("launch -- furnace --version", "PATH=/usr/bin:/bin");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[rank0]:furnace 0.1.0\n");
}

TEST_F(CliLaunch, AFailingWorkerStopsTheOthersAndIsNamed) {
  const auto t0 = Clock::now();
  const CliRun r = launch("--nproc-per-node 3", "if [ $RANK = 1 ]; then sleep 0.2; exit 3; fi; sleep 30");
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, ::testing::ContainsRegex("furnace launch: rank 1 \\(local_rank 1, pid [0-9]+\\) failed: exit code 3\n"));
  EXPECT_THAT(r.err, ::testing::ContainsRegex(
                         "furnace launch:   rank 0 \\(local_rank 0, pid [0-9]+\\): stopped by launch: killed by signal 15 \\(SIGTERM\\)\n"));
  EXPECT_THAT(r.err, ::testing::ContainsRegex(
                         "furnace launch:   rank 2 \\(local_rank 2, pid [0-9]+\\): stopped by launch: killed by signal 15 \\(SIGTERM\\)\n"));
}

TEST_F(CliLaunch, AWorkerKilledBySignalIsNamedWithIt) {
  const CliRun r = launch("--nproc-per-node 2", "if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 30");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, ::testing::ContainsRegex(
                         "furnace launch: rank 0 \\(local_rank 0, pid [0-9]+\\) failed: killed by signal 9 \\(SIGKILL\\)\n"));
}

TEST_F(CliLaunch, AWorkerIgnoringSigtermGetsSigkillAfterTheGracePeriod) {
  const auto t0 = Clock::now();
  const CliRun r = launch("--nproc-per-node 2 --grace-period 0.5",
                          "if [ $RANK = 1 ]; then sleep 0.3; exit 2; fi; trap \"\" TERM; sleep 30");
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("failed: exit code 2\n"));
  EXPECT_THAT(r.err, HasSubstr("stopped by launch: killed by signal 9 (SIGKILL) after the 0.5 s grace period\n"));
}

TEST_F(CliLaunch, AllSucceedingIsExitZeroAndSilent) {
  const CliRun r = launch("--nproc-per-node 3", "exit 0", "OMP_NUM_THREADS=2");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

// The pids a worker script printed as "pids <sh> <background sleep>" in the launch log.
std::vector<pid_t> pids_in(const std::string& log) {
  std::vector<pid_t> pids;
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t at = line.find("pids ");
    if (at == std::string::npos) continue;
    std::istringstream words(line.substr(at + 5));
    pid_t p;
    while (words >> p) pids.push_back(p);
  }
  return pids;
}

bool gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  // A zombie waiting for init counts as gone.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  return close == std::string::npos || text.substr(close + 2, 1) == "Z";
}

// SIGTERM (a scheduler) and SIGINT (Ctrl-C) to launch reach every worker's whole process group:
// the worker shells and the sleeps they started in the background are all gone afterwards. (A
// shell in `wait` may outlive SIGINT, and its background job ignores SIGINT: SIGKILL after the
// grace period ends them.)
TEST_F(CliLaunch, StopSignalsReachEveryWorkerAndLeaveNoProcessBehind) {
  for (int sig : {SIGTERM, SIGINT}) {
    const auto log = dir_ / ("launch" + std::to_string(sig) + ".log");
    const pid_t launcher =
        furnace::cli_test::spawn({"launch", "--nproc-per-node", "2", "--grace-period", "1", "--", "sh", "-c", "sleep 30 & echo pids $$ $!; wait"}, log);
    std::vector<pid_t> pids;
    const auto t0 = Clock::now();
    while (pids.size() < 4 && seconds_since(t0) < 5) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      pids = pids_in(furnace::cli_test::slurp(log));
    }
    ASSERT_EQ(pids.size(), 4u) << furnace::cli_test::slurp(log);
    ASSERT_EQ(::kill(launcher, sig), 0);
    EXPECT_EQ(furnace::cli_test::wait_for(launcher), 128 + sig);
    const auto t1 = Clock::now();
    for (pid_t p : pids) {
      while (!gone(p) && seconds_since(t1) < 3) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_TRUE(gone(p)) << "pid " << p << " outlived launch";
      if (!gone(p)) ::kill(p, SIGKILL);
    }
    const std::string text = furnace::cli_test::slurp(log);
    EXPECT_THAT(text, HasSubstr("furnace launch: received SIG"));
    EXPECT_THAT(text, HasSubstr("furnace launch: stopped by SIG"));
  }
}

TEST_F(CliLaunch, BadInputGetsOneLineAndStartsNothing) {
  expect_one_line_error("launch --nproc-per-node 0 -- true", "furnace: error: --nproc-per-node must be at least 1 (got 0)");
  expect_one_line_error("launch --nproc-per-node -2 -- true", "--nproc-per-node must be at least 1 (got -2)");
  expect_one_line_error("launch --nproc-per-node gpu -- true", "--nproc-per-node");
  expect_one_line_error("launch --nnodes 2 --node-rank 2 -- true", "--node-rank 2 is outside [0, 1] for --nnodes 2");
  expect_one_line_error("launch --nnodes 2 --master-port 0 -- true", "--master-port 0 (pick a free port) needs --nnodes 1");
  expect_one_line_error("launch --master-port 65536 -- true", "--master-port must be in [0, 65535] (got 65536)");
  expect_one_line_error("launch --grace-period -1 -- true", "--grace-period must be in [0, 3600] seconds (got -1)");
  expect_one_line_error("launch --nproc-per-node 2", "no worker command");
  const CliRun r = expect_one_line_error("launch -- no-such-program-xyz --flag",
                                         "furnace launch: rank 0: cannot run 'no-such-program-xyz': No such file or directory");
  EXPECT_EQ(r.status, 1);
  // With several workers the first that cannot run stops the launch before the others start.
  const CliRun two = furnace("launch --nproc-per-node 3 -- ./no-such-program-xyz", "OMP_NUM_THREADS=1");
  EXPECT_EQ(two.status, 1);
  EXPECT_EQ(two.err, "furnace launch: rank 0: cannot run './no-such-program-xyz': No such file or directory\n");
}

}  // namespace
