// `furnace train --checkpoint / --save-every / --resume / --stop-at-step / --strict-keys` as a user
// runs it: an interrupted and resumed run ends with the same bits as an uninterrupted one; bad
// checkpoints and bad flag combinations get one line and a non-zero exit; the "module." prefix is
// shown and explained; and a scenario the machine's RAM cannot hold is refused before it starts.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>

#include "furnace/checkpoint.h"
#include "furnace/host_memory.h"
#include "integration/cli_harness.h"

namespace furnace::cli_test {
namespace {

class CliCheckpoint : public CliHarness {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // 2,000 images, batch 100: 20 steps per epoch.
  std::string small() const { return "train --quiet --data " + slice() + " --batch 100 --hidden 32 --seed 3"; }
  CliRun ok(const std::string& args) {
    CliRun r = furnace(args);
    EXPECT_EQ(r.status, 0) << args << "\n" << r.err;
    return r;
  }
  // A checkpoint of a short run, written once per test.
  std::string trained(const std::string& name, const std::string& extra = "") {
    ok(small() + " --epochs 2 --no-eval --checkpoint " + path(name) + " " + extra);
    return path(name);
  }
  std::string bytes_of(const std::string& p) { return slurp(p); }
};

void expect_same_weights(const Checkpoint& a, const Checkpoint& b) {
  ASSERT_EQ(a.model.size(), b.model.size());
  for (size_t i = 0; i < a.model.size(); ++i) {
    ASSERT_EQ(a.model[i].values.size(), b.model[i].values.size());
    EXPECT_EQ(std::memcmp(a.model[i].values.data(), b.model[i].values.data(), a.model[i].values.size() * 4), 0)
        << a.model[i].name;
  }
  ASSERT_EQ(a.optimizer_state.size(), b.optimizer_state.size());
  for (size_t i = 0; i < a.optimizer_state.size(); ++i)
    EXPECT_EQ(std::memcmp(a.optimizer_state[i].values.data(), b.optimizer_state[i].values.data(), a.optimizer_state[i].values.size() * 4), 0);
  EXPECT_EQ(a.scaler, b.scaler);
}

TEST_F(CliCheckpoint, StopAndResumeEqualsTheStraightRunBitForBit) {
  const CliRun straight = ok(small() + " --epochs 2 --json --checkpoint " + path("straight.ckpt"));
  const CliRun first = ok(small() + " --epochs 2 --checkpoint " + path("run.ckpt") + " --stop-at-step 20");
  EXPECT_NE(first.out.find("stopped         at step 20 (--stop-at-step), not evaluated: continue with furnace "
                           "train --resume"),
            std::string::npos) << first.out;
  // --resume alone: the checkpoint's scenario, saving on to the same file.
  const CliRun second = ok("train --quiet --json --resume " + path("run.ckpt"));
  EXPECT_EQ(straight.last_json()["final_loss"], second.last_json()["final_loss"]);
  EXPECT_EQ(straight.last_json()["test_accuracy"], second.last_json()["test_accuracy"]);
  EXPECT_EQ(straight.last_json()["epoch_mean_loss"], second.last_json()["epoch_mean_loss"]);
  EXPECT_EQ(second.last_json()["checkpoint"]["resumed_from_step"], 20);
  EXPECT_EQ(second.last_json()["checkpoint"]["last_step"], 40);
  expect_same_weights(read_checkpoint(path("straight.ckpt")), read_checkpoint(path("run.ckpt")));
  // The same state gives the same file.
  EXPECT_EQ(bytes_of(path("straight.ckpt")), bytes_of(path("run.ckpt")));
}

// A finished run resumed trains nothing, and says so instead of a speed of 0 samples/s.
TEST_F(CliCheckpoint, ResumingAFinishedRunSaysThereIsNothingToTrain) {
  const std::string ckpt = trained("done.ckpt");
  const CliRun r = ok("train --resume " + ckpt);
  EXPECT_NE(r.out.find("resumed from step 40"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nothing to train: the checkpoint is at the run's last step"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("throughput"), std::string::npos) << r.out;
}

TEST_F(CliCheckpoint, DataParallelFp16WithWorkersResumesMidEpochBitForBit) {
  const std::string dp = small() + " --epochs 2 --topology workstation-4x3090 --parallel dp --amp fp16 "
                                   "--init-scale 16777216 --growth-interval 3 --workers 2";
  ok(dp + " --checkpoint " + path("straight.ckpt"));
  ok(dp + " --checkpoint " + path("run.ckpt") + " --save-every 4 --stop-at-step 13");
  const Checkpoint mid = read_checkpoint(path("run.ckpt"));
  EXPECT_EQ(mid.step, 13);
  EXPECT_EQ(mid.loader.next_batch, 13);  // the middle of the first epoch
  EXPECT_EQ(mid.save_every, 4);
  EXPECT_EQ(mid.model[0].name, "module.0.weight");
  EXPECT_FALSE(mid.scaler.empty());
  ok("train --quiet --resume " + path("run.ckpt"));
  expect_same_weights(read_checkpoint(path("straight.ckpt")), read_checkpoint(path("run.ckpt")));
}

TEST_F(CliCheckpoint, DdpResumesWithItsWorldSizeBitForBitAndRefusesAnotherPaddingMidEpoch) {
  // Global batch 120: 17 steps per epoch; 2,000 images pad to 2,000 for 2 ranks and 2,001 for 3.
  const std::string ddp = "train --quiet --data " + slice() + " --batch 120 --hidden 32 --seed 3 --epochs 1 "
                          "--no-eval --topology dgx-h100 --parallel ddp --nproc 2";
  ok(ddp + " --checkpoint " + path("straight.ckpt"));
  ok(ddp + " --checkpoint " + path("run.ckpt") + " --stop-at-step 5");
  expect_one_line_error("train --resume " + path("run.ckpt") + " --nproc 3",
                        "DistributedSampler pads each epoch's order to ceil(N / world) * world samples, 2000 for 2 "
                        "ranks and 2001 for 3");
  // --resume keeps the saved --nproc.
  const CliRun r = ok("train --resume " + path("run.ckpt"));
  EXPECT_NE(r.out.find("resumed from " + path("run.ckpt") + ": optimizer step 5 of 17"), std::string::npos) << r.out;
  expect_same_weights(read_checkpoint(path("straight.ckpt")), read_checkpoint(path("run.ckpt")));
}

TEST_F(CliCheckpoint, TheModulePrefixIsShownAndExplained) {
  const std::string ck = trained("dp.ckpt", "--topology workstation-4x3090 --parallel dp --steps 3");
  const CliRun r = ok("train --resume " + ck + " --parallel none --checkpoint " + path("single.ckpt"));
  EXPECT_NE(r.out.find("resumed from " + ck + ": optimizer step 3 of 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("state_dict keys: the checkpoint's (saved by DataParallel): module.0.weight, module.0.bias, "
                       "module.2.weight, module.2.bias (4 keys)"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("this model's (Sequential): 0.weight, 0.bias, 2.weight, 2.bias (4 keys)"), std::string::npos);
  EXPECT_NE(r.out.find("holds the real model as its child `module`"), std::string::npos);
  EXPECT_NE(r.out.find("RuntimeError: Error(s) in loading state_dict for Sequential: Missing key(s) in state_dict: "
                       "\"0.weight\", \"0.bias\"."),
            std::string::npos) << r.out;
  EXPECT_EQ(read_checkpoint(path("single.ckpt")).model[0].name, "0.weight");
  expect_one_line_error("train --resume " + ck + " --parallel none --strict-keys",
                        "(--strict-keys, as PyTorch's model.load_state_dict): Error(s) in loading state_dict for "
                        "Sequential: Missing key(s) in state_dict: \"0.weight\"");
}

TEST_F(CliCheckpoint, BadCheckpointsGetOneLine) {
  const std::string good = trained("good.ckpt", "--steps 2");
  const std::string bytes = bytes_of(good);
  expect_one_line_error("train --resume " + path("missing.ckpt"), "missing.ckpt: cannot open: No such file or directory");
  expect_one_line_error("train --resume " + write_file("trunc.ckpt", bytes.substr(0, bytes.size() / 2)), "truncated");
  expect_one_line_error("train --resume " + write_file("empty.ckpt", ""), "not a Furnace checkpoint");
  expect_one_line_error("train --resume " + write_file("magic.ckpt", "PK" + bytes.substr(2)), "not a Furnace checkpoint");
  std::string version = bytes;
  version[8] = 9;
  expect_one_line_error("train --resume " + write_file("version.ckpt", version), "version 9 is not supported");
  std::string flipped = bytes;
  flipped[bytes.size() - 100] = static_cast<char>(flipped[bytes.size() - 100] ^ 0x40);
  expect_one_line_error("train --resume " + write_file("flip.ckpt", flipped), "checksum mismatch");
  expect_one_line_error("train --resume " + good + " --hidden 64",
                        "does not fit this model (MLP 784-64-10; the checkpoint's scenario has --hidden 32): "
                        "Error(s) in loading state_dict for Sequential: size mismatch for 0.weight");
  expect_one_line_error("train --resume " + good + " --hidden 32,32",
                        "Missing key(s) in state_dict: \"4.weight\", \"4.bias\".");
  expect_one_line_error("train --resume " + path("good.ckpt") + " --batch 64",
                        "--batch 64 differs from the checkpoint's 100: --resume continues the saved run");
  // A failed resume leaves the checkpoint as it was.
  EXPECT_EQ(bytes_of(good), bytes);
}

TEST_F(CliCheckpoint, BadFlagCombinationsGetOneLine) {
  expect_one_line_error(small() + " --save-every 5", "--save-every needs --checkpoint PATH");
  expect_one_line_error(small() + " --save-every 0 --checkpoint " + path("a.ckpt"), "--save-every must be at least 1");
  expect_one_line_error(small() + " --stop-at-step 5", "--stop-at-step needs --checkpoint PATH");
  expect_one_line_error(small() + " --strict-keys", "--strict-keys needs --resume PATH");
  const std::string ck = trained("a.ckpt", "--steps 4 --stop-at-step 3");
  expect_one_line_error("train --resume " + ck + " --stop-at-step 2", "--stop-at-step 2 is not after the checkpoint's step 3");
  expect_one_line_error(small() + " --checkpoint " + path("no/such/dir/x.ckpt") + " --steps 1",
                        "cannot save checkpoint");
}

TEST_F(CliCheckpoint, ATraceOrCheckpointThatCannotBeWrittenIsRefusedBeforeTheRunNotAfterIt) {
  // Not --quiet: the banner line would be on stdout had training started.
  const std::string run = "train --data " + slice() + " --batch 100 --hidden 32 --epochs 20";
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  struct Case {
    std::string flags, line;
  };
  const std::vector<Case> cases = {
      {" --checkpoint " + path("no/x.ckpt"), "cannot save checkpoint " + path("no/x.ckpt") + ": folder " + path("no") + " does not exist"},
      {" --checkpoint " + fifo + "/x.ckpt", "cannot save checkpoint " + fifo + "/x.ckpt: " + fifo + " is not a folder"},
      {" --checkpoint " + fifo, "cannot save checkpoint " + fifo + ": it exists and is not a regular file"},
      {" --trace " + path("no/t.json"), "cannot write trace file '" + path("no/t.json") + "': folder " + path("no") + " does not exist"},
      {" --trace " + fifo, "cannot write trace file '" + fifo + "': it exists and is not a regular file"},
  };
  for (const Case& c : cases) {
    const CliRun r = expect_one_line_error(run + c.flags, c.line);
    EXPECT_EQ(r.out, "") << c.flags << ": refused before the banner, so before training";
  }
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(path("locked"));
    fs::permissions(path("locked"), fs::perms::owner_read | fs::perms::owner_exec);
    const CliRun r = expect_one_line_error(run + " --checkpoint " + path("locked/x.ckpt"),
                                           "folder " + path("locked") + " is not writable");
    EXPECT_EQ(r.out, "");
    fs::permissions(path("locked"), fs::perms::owner_all);
  }
}

TEST_F(CliCheckpoint, AScenarioTheHostCannotHoldIsRefusedBeforeItStarts) {
  // One simulated GPU of 1 PiB, so PyTorch's out-of-memory error cannot come first: only the
  // machine's RAM limits the run. Two hidden layers sized to need about 4x what is available.
  const HostMemoryBudget budget = host_memory_budget();  // MemAvailable, or a container's or ulimit's less
  ASSERT_TRUE(budget.known) << budget.source;
  const uint64_t available = budget.bytes;
  uint64_t width = 1024;
  while (width < (1u << 20) && 12.0 * static_cast<double>(width) * static_cast<double>(width) < 4.0 * static_cast<double>(available))
    width *= 2;
  const std::string topo = huge_gpu_topology();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string base = "train --quiet --data " + slice() + " --batch 100 --hidden ";
  const CliRun r = expect_one_line_error(base + std::to_string(width) + "," + std::to_string(width) + " --topology " + topo,
                                         "of host memory and this machine has");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 20.0) << "refused up front, not attempted";
  EXPECT_NE(r.err.find("this scenario needs about"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("available (" + budget.source.substr(0, 16)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cuda:0"), std::string::npos) << r.err;
  // On a real-sized GPU a model that large stops at PyTorch's out-of-memory error, as before.
  expect_one_line_error(base + "100000,100000", "CUDA out of memory. Tried to allocate");
}

}  // namespace
}  // namespace furnace::cli_test
