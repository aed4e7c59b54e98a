// Issue 19's attacks on `furnace` as a user (and a hostile one) runs it: memory limits (ulimit -v,
// a container's cgroup, no way to tell), two runs on one checkpoint, Ctrl-C / SIGTERM / SIGHUP, a
// full disk, a symlinked checkpoint, checkpoints with impossible values, and messages that named
// the wrong cause. Each gets one clear line and a non-zero exit (or does what was asked), never a
// crash, a hang or a silent success. docs/input-surfaces.md ("Limits and faults") lists them.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "furnace/atomic_file.h"  // defines: FileLock
#include "furnace/checkpoint.h"
#include "integration/cli_harness.h"
#include "integration/spawn.h"  // defines: spawn, wait_for

namespace furnace::cli_test {
namespace {

using Clock = std::chrono::steady_clock;

class Faults : public CliHarness {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // 2,000 images, batch 100: 20 steps per epoch; `small` adds a 32-wide hidden layer.
  std::string base() const { return "train --quiet --no-eval --data " + slice() + " --batch 100 --seed 3"; }
  std::string small() const { return base() + " --hidden 32"; }
  // `script` run by /bin/sh (for ulimit and trap), with $FURNACE the binary.
  CliRun shell(const std::string& script, int timeout_s = 120) {
    const std::string file = write_file("script.sh", "FURNACE=" + std::string(FURNACE_CLI) + "\n" + script + "\n");
    return run_program("sh", file, "", dir_, timeout_s);
  }
  // A fake cgroup folder with these files.
  std::string cgroup(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) {
    fs::create_directories(path(name));
    for (const auto& [file, text] : files) write_file(name + "/" + file, text + "\n");
    return path(name);
  }
  bool temporaries_left() const {
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
    return false;
  }
};

// ---- memory limits ----------------------------------------------------------------------------

// AddressSanitizer reserves terabytes of address space at start-up: under ulimit -v a sanitized
// binary cannot even start, so these attacks run in the plain build only.
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_UNDER_ASAN() GTEST_SKIP() << "ASan's shadow memory does not fit under ulimit -v"
#else
#define SKIP_UNDER_ASAN() (void)0
#endif

std::string bytes_of(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_F(Faults, TheUlimitVAttackEndsWithOneLineNotAHang) {
  SKIP_UNDER_ASAN();
  // The attack as filed (four simulated 3090s, two 4096-wide layers, a 2 GB address space), with
  // OpenBLAS on 16 threads as on the machine where it hung; then tighter limits, where the run
  // must stop at the guard or at an allocation, saying it is host memory.
  const std::string run = "$FURNACE train --quiet --no-eval --data " + slice() +
                          " --topology workstation-4x3090 --parallel dp --hidden 4096,4096 --steps 1";
  for (const char* limit : {"2000000", "1600000", "1000000"}) {
    const CliRun r = shell(std::string("ulimit -v ") + limit + "; OPENBLAS_NUM_THREADS=16 exec " + run, 90);
    EXPECT_FALSE(r.crashed()) << "ulimit -v " << limit << ": status " << r.status << " (a hang, or killed)\n" << r.err;
    if (r.status == 0) continue;  // it fitted
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("host memory"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("CUDA out of memory"), std::string::npos) << r.err;
  }
  // Well below what the scenario needs: the guard refuses before anything is allocated.
  const CliRun r = shell("ulimit -v 1000000; exec " + run, 90);
  expect_one_line_failure(r, "ulimit -v 1000000", "of host memory and this machine has");
  EXPECT_NE(r.err.find("available (the limit RLIMIT_AS (ulimit -v) 976.56 MiB minus this process's mappings"),
            std::string::npos) << r.err;
}

TEST_F(Faults, ThreadsTheSystemCannotStartAreNamed) {
  SKIP_UNDER_ASAN();
  // Each thread reserves a stack of RLIMIT_STACK (100 MB here): 1,000 loader workers cannot all
  // start in a 20 GB address space.
  const CliRun r = shell("ulimit -s 100000; ulimit -v 20000000; exec $FURNACE train --quiet --data " + slice() +
                             " --hidden 32 --steps 1 --workers 1000",
                         90);
  expect_one_line_failure(r, "--workers 1000", "DataLoader: cannot start worker ");
  EXPECT_NE(r.err.find(" of 1000 (num_workers=1000): Resource temporarily unavailable (the limit on threads or memory "
                       "for their stacks; use fewer --workers)"),
            std::string::npos) << r.err;
}

TEST_F(Faults, TheGuardTakesAContainersCgroupV2Limit) {
  // memory.max 256 MiB, 64 MiB used: 192 MiB left, less than the 784-4096-4096-10 MLP needs.
  const std::string dir = cgroup("cg2", {{"memory.max", "268435456"}, {"memory.current", "67108864"}});
  const CliRun r = expect_one_line_error(base() + " --hidden 4096,4096 --steps 1",
                                         "this machine has 192.00 MiB available (the cgroup's memory.max 256.00 MiB "
                                         "minus its usage 64.00 MiB, in " + dir + ")",
                                         "FURNACE_CGROUP_DIR=" + dir);
  std::printf("[ guard ] %s", r.err.c_str());
  // No limit ("max"): the same run goes ahead.
  const std::string none = cgroup("cg-max", {{"memory.max", "max"}, {"memory.current", "67108864"}});
  EXPECT_EQ(furnace(base() + " --hidden 4096,4096 --steps 1", "FURNACE_CGROUP_DIR=" + none).status, 0);
}

TEST_F(Faults, TheGuardTakesACgroupV1Limit) {
  const std::string dir = cgroup("cg1", {{"memory.limit_in_bytes", "134217728"}, {"memory.usage_in_bytes", "0"}});
  expect_one_line_error(base() + " --hidden 4096,4096 --steps 1",
                        "available (the cgroup's memory.limit_in_bytes 128.00 MiB minus its usage 0 bytes",
                        "FURNACE_CGROUP_DIR=" + dir);
}

TEST_F(Faults, WithNoWayToTellTheLimitABigScenarioIsRefused) {
  const std::string empty = cgroup("cg-empty", {});
  const std::string env = "FURNACE_MEMINFO=" + path("nowhere") + " FURNACE_CGROUP_DIR=" + empty;
  // 784-12000-12000-10: about 1.7 GiB, over the 1 GiB allowed when the limit is unknown.
  const CliRun r = expect_one_line_error(base() + " --hidden 12000,12000 --steps 1",
                                         "how much this process may use is unknown", env);
  EXPECT_NE(r.err.find("scenarios over 1024.00 MiB are refused"), std::string::npos) << r.err;
  EXPECT_EQ(furnace(small() + " --steps 1", env).status, 0) << "a small one still runs";
}

TEST_F(Faults, AHostAllocationFailureIsHostMemoryNotTheSimulatedGpu) {
  // One simulated GPU of 1 PiB: a 200 TiB allocation fits it, but no process can map that much.
  const std::string topo = huge_gpu_topology();
  const CliRun r = expect_one_line_error("memory --alloc 200TiB --topology " + topo,
                                         "out of host memory: the simulator could not map 204800.00 GiB of host RAM "
                                         "for an allocation on the simulated Huge GPU (mmap: Cannot allocate memory)");
  EXPECT_EQ(r.err.find("CUDA out of memory"), std::string::npos) << r.err;
}

// ---- checkpoints: one writer, symlinks, impossible values --------------------------------------

TEST_F(Faults, ASecondRunOnTheSameCheckpointGetsOneLineNamingTheFirst) {
  const std::string ck = path("run.ckpt");
  {
    FileLock held(ck, "test");  // this test process is "the other run"
    write_file("run.ckpt.tmp.AbC123", "half a checkpoint from a killed save");
    expect_one_line_error(small() + " --steps 1 --checkpoint " + ck,
                          "cannot save checkpoint " + ck + ": " + ck + " is in use by another furnace run (process " +
                              std::to_string(::getpid()) + "; it holds " + ck + ".lock)");
    EXPECT_TRUE(fs::exists(path("run.ckpt.tmp.AbC123"))) << "the holder's files are left alone";
  }
  EXPECT_EQ(furnace(small() + " --steps 2 --checkpoint " + ck).status, 0);
  EXPECT_EQ(read_checkpoint(ck).step, 2);
  EXPECT_FALSE(temporaries_left()) << "the killed save's temporary file is removed once the lock is held";
}

TEST_F(Faults, WhatARunWritesMayNotReplaceWhatItReads) {
  const std::string ck = path("run.ckpt");
  ASSERT_EQ(furnace(small() + " --steps 2 --checkpoint " + ck).status, 0);
  const std::string saved = bytes_of(ck);
  // The trace over the checkpoint it resumes from, or over the one it saves, or over a dataset file.
  expect_one_line_error("train --quiet --resume " + ck + " --trace " + ck + " --stop-at-step 3",
                        "--trace and --resume name the same file " + ck + ": the trace would replace the checkpoint");
  expect_one_line_error("train --quiet --resume " + ck + " --checkpoint " + path("other.ckpt") + " --trace " + ck,
                        "--trace names the --resume checkpoint " + ck + ": the trace would replace it");
  expect_one_line_error(small() + " --steps 2 --checkpoint " + path("x.ckpt") + " --trace " + (dir_ / "." / "x.ckpt").string(),
                        "--trace and --checkpoint name the same file");
  const std::string data = broken_copy("README", "");  // an intact copy of the slice, and a stray file
  const std::string labels = data + "/train-labels-idx1-ubyte.gz";
  const std::string labels_bytes = bytes_of(labels);
  expect_one_line_error("train --quiet --data " + data + " --steps 2 --trace " + labels,
                        "--trace " + labels + " is a dataset file of --data: the trace would replace it");
  expect_one_line_error("train --quiet --data " + data + " --steps 2 --checkpoint " + data + "/../" +
                            fs::path(data).filename().string() + "/t10k-images-idx3-ubyte.gz",
                        "is a dataset file of --data: the checkpoint would replace it");
  EXPECT_EQ(bytes_of(ck), saved) << "the checkpoint is untouched";
  EXPECT_EQ(bytes_of(labels), labels_bytes) << "the dataset is untouched";
  EXPECT_FALSE(fs::exists(path("x.ckpt")));
}

TEST_F(Faults, ResumingThroughASymlinkReplacesTheTargetAndKeepsTheLink) {
  const std::string target = path("target.ckpt"), link = path("link.ckpt");
  ASSERT_EQ(furnace(small() + " --epochs 1 --checkpoint " + target + " --stop-at-step 5").status, 0);
  fs::create_symlink(target, link);
  const CliRun r = furnace("train --quiet --resume " + link);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link))) << "the link stays a link";
  EXPECT_EQ(read_checkpoint(target).step, 20) << "the target received the saves";
  EXPECT_FALSE(temporaries_left());
}

// A copy of `ck` with `change` applied, written with a valid CRC.
std::string altered(const std::string& ck, const std::string& out, const std::function<void(Checkpoint&)>& change) {
  Checkpoint c = read_checkpoint(ck);
  change(c);
  const std::vector<uint8_t> bytes = serialize_checkpoint(c);
  std::ofstream(out, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return out;
}

TEST_F(Faults, ACheckpointWithAnImpossibleScalerStateIsRefused) {
  const std::string ck = path("fp16.ckpt");
  ASSERT_EQ(furnace(small() + " --amp fp16 --steps 2 --checkpoint " + ck).status, 0);
  for (double scale : {-1.0, 0.0, 1e308}) {
    const std::string bad = altered(ck, path("bad.ckpt"), [&](Checkpoint& c) { c.scaler["scale"] = scale; });
    expect_one_line_error("train --quiet --resume " + bad, "checkpoint " + bad + ": metadata field 'scaler.scale' must be a positive finite float32");
  }
  const std::string growth = altered(ck, path("g.ckpt"), [](Checkpoint& c) { c.scaler["growth_factor"] = 0.5; });
  expect_one_line_error("train --quiet --resume " + growth, "metadata field 'scaler.growth_factor' must be > 1.0");
  const std::string backoff = altered(ck, path("b.ckpt"), [](Checkpoint& c) { c.scaler["backoff_factor"] = 1.5; });
  expect_one_line_error("train --quiet --resume " + backoff, "metadata field 'scaler.backoff_factor' must be in (0, 1)");
  const std::string interval = altered(ck, path("i.ckpt"), [](Checkpoint& c) { c.scaler["growth_interval"] = 0; });
  expect_one_line_error("train --quiet --resume " + interval, "metadata field 'scaler.growth_interval' must be a positive integer");
  const std::string tracker = altered(ck, path("t.ckpt"), [](Checkpoint& c) {
    c.scaler["_growth_tracker"] = c.scaler["growth_interval"];
  });
  expect_one_line_error("train --quiet --resume " + tracker, "metadata field 'scaler._growth_tracker' must be below growth_interval");
}

TEST_F(Faults, ACheckpointsScenarioThatDoesNotFitThisMachineNamesTheCheckpoint) {
  const std::string ck = path("run.ckpt");
  ASSERT_EQ(furnace(small() + " --steps 2 --checkpoint " + ck).status, 0);
  const std::string moved = altered(ck, path("topo.ckpt"), [](Checkpoint& c) { c.scenario.topology = "gone-machine"; });
  expect_one_line_error("train --quiet --resume " + moved,
                        "checkpoint " + moved + ": its scenario's topology: unknown topology 'gone-machine'");
  const std::string data = altered(ck, path("data.ckpt"), [&](Checkpoint& c) { c.scenario.data_dir = path("gone-data"); });
  expect_one_line_error("train --quiet --resume " + data,
                        "checkpoint " + data + ": its scenario's data folder " + path("gone-data") +
                            " does not exist here (--data DIR overrides it)");
}

// ---- signals ----------------------------------------------------------------------------------

// Starts a long run saving to run.ckpt after every step, waits for its first save, sends `sig`.
struct Stopped {
  int status = -1;
  std::string err;
};
Stopped stop_with(const fs::path& dir, int sig, bool checkpoint, int second_sig = 0, const char* hidden = "256,256") {
  std::vector<std::string> args = {"train", "--quiet", "--no-eval", "--data", std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist",
                                   "--batch", "100", "--hidden", hidden, "--epochs", checkpoint ? "20" : "1000"};
  const std::string ck = (dir / "run.ckpt").string();
  if (checkpoint) args.insert(args.end(), {"--checkpoint", ck, "--save-every", "1"});
  const fs::path log = dir / "signal.log";
  fs::remove(log);
  fs::remove(ck);
  const pid_t pid = spawn(args, log);
  // The handlers are in place once the run has saved (or, without a checkpoint, a moment after
  // start-up; that run is 20,000 steps long).
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  const fs::path ready = checkpoint ? fs::path(ck) : fs::path();
  while (checkpoint && !fs::exists(ready) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!checkpoint) std::this_thread::sleep_for(std::chrono::seconds(1));
  ::kill(pid, sig);
  if (second_sig) {  // apart, or the kernel merges the two into one pending signal
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(pid, second_sig);
  }
  Stopped s;
  s.status = wait_for(pid);
  s.err = slurp(log);
  return s;
}

TEST_F(Faults, CtrlCSigtermAndSighupSaveAndSayHowToResume) {
  const std::string ck = path("run.ckpt");
  for (const auto& [sig, name] : std::vector<std::pair<int, std::string>>{{SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"}}) {
    const Stopped s = stop_with(dir_, sig, true);
    EXPECT_EQ(s.status, 128 + sig) << name << ": " << s.err;
    EXPECT_EQ(count_lines(s.err), 1) << s.err;
    const std::string prefix = "furnace: stopped by " + name + " after step ";
    ASSERT_EQ(s.err.rfind(prefix, 0), 0u) << s.err;
    const int64_t step = std::stoll(s.err.substr(prefix.size()));
    EXPECT_NE(s.err.find(" of 400; checkpoint saved to " + ck + ": continue with furnace train --resume " + ck + "\n"),
              std::string::npos) << s.err;
    EXPECT_EQ(read_checkpoint(ck).step, step) << "saved at the step it names";
  }
}

TEST_F(Faults, WithoutACheckpointTheLineSaysNothingWasSaved) {
  const Stopped s = stop_with(dir_, SIGTERM, false);
  EXPECT_EQ(s.status, 143) << s.err;
  EXPECT_EQ(count_lines(s.err), 1) << s.err;
  EXPECT_NE(s.err.find("furnace: stopped by SIGTERM after step "), std::string::npos) << s.err;
  EXPECT_NE(s.err.find("; nothing saved (without --checkpoint PATH a stopped run cannot be resumed)"), std::string::npos) << s.err;
}

TEST_F(Faults, ASecondCtrlCStopsAtOnce) {
  // Steps of a 784-4096-4096-10 MLP take long enough for the second signal to land inside one.
  const Stopped s = stop_with(dir_, SIGINT, true, SIGINT, "4096,4096");
  EXPECT_EQ(s.status, 130) << s.err;
  EXPECT_NE(s.err.find("stopping now (second signal): no checkpoint saved"), std::string::npos) << s.err;
  EXPECT_EQ(s.err.find("furnace: stopped by"), std::string::npos) << "it did not wait for the step: " << s.err;
  EXPECT_NO_THROW(read_checkpoint(path("run.ckpt"))) << "the last save is intact";
}

// ---- output that does not arrive ----------------------------------------------------------------

TEST_F(Faults, AFullDiskUnderATraceGivesTheReasonAndLeavesNoTemporaryFile) {
  // ulimit -f 16 (dash counts 512-byte blocks): writes past 8 KiB fail (EFBIG) as on a full disk;
  // furnace ignores SIGXFSZ (main.cpp), so the write returns the error instead of killing it.
  const CliRun r = shell("ulimit -f 16; exec $FURNACE train --quiet --data " + slice() +
                         " --hidden 32 --steps 20 --trace " + path("t.json"));
  expect_one_line_failure(r, "--trace on a full disk", "cannot write trace file '" + path("t.json") + "': write: File too large");
  EXPECT_FALSE(fs::exists(path("t.json")));
  EXPECT_FALSE(temporaries_left());
  // A checkpoint save that no longer fits: the one saved before stays as it was.
  const std::string ck = path("run.ckpt");
  ASSERT_EQ(furnace(base() + " --steps 2 --checkpoint " + ck).status, 0);
  const std::string saved = bytes_of(ck);
  const CliRun big = shell("ulimit -f " + std::to_string(fs::file_size(ck) / 512 / 2) + "; exec $FURNACE train --quiet --resume " +
                           ck + " --stop-at-step 3");
  expect_one_line_failure(big, "a checkpoint on a full disk", "cannot save checkpoint " + ck + ": write: File too large");
  EXPECT_EQ(bytes_of(ck), saved);
  EXPECT_FALSE(temporaries_left());
}

TEST_F(Faults, WorkersOutputThatCannotBeWrittenFailsTheLaunch) {
  // The workers succeed, but what they print never arrives: as for every other command, exit 1.
  const CliRun r = shell("OMP_NUM_THREADS=1 exec $FURNACE launch --nproc-per-node 2 -- echo hi > /dev/full");
  expect_one_line_failure(r, "launch > /dev/full",
                          "furnace launch: cannot write the workers' output to standard output: No space left on device");
}

TEST_F(Faults, MoreWorkersThanTheOpenFileLimitHoldsAreRefusedBeforeAnyStarts) {
  const CliRun r = shell("ulimit -n 256; exec $FURNACE launch --nproc-per-node 1000 -- true");
  // "at most N": 256 less what the process has open, halved.
  expect_one_line_failure(r, "launch under ulimit -n 256",
                          "--nproc-per-node 1000: each worker's output takes 2 open files here, and this process may "
                          "open 256 (ulimit -n): at most 1");
  EXPECT_NE(r.err.find(" workers, or --no-prefix"), std::string::npos) << r.err;
}

TEST_F(Faults, ACtrlCWhileManyWorkersStartStopsTheStarting) {
  // 1000 workers take seconds to start; a Ctrl-C after one second stops there, not after the last.
  const CliRun r = shell("OMP_NUM_THREADS=1 $FURNACE launch --nproc-per-node 1000 -- sleep 60 & P=$!; sleep 1; "
                         "kill -INT $P; wait $P", 60);
  EXPECT_EQ(r.status, 130) << r.err;
  size_t ranks = 0;
  for (size_t at = r.err.find("(local_rank "); at != std::string::npos; at = r.err.find("(local_rank ", at + 1)) ++ranks;
  EXPECT_GT(ranks, 0u) << r.err;
  EXPECT_LT(ranks, 1000u) << "every worker was started before the signal was heeded";
}

TEST_F(Faults, ALongEnvironmentVariableIsShortenedInTheMessage) {
  const std::string visible(100000, '9');
  const CliRun r = expect_one_line_error("train --data " + slice(), "CUDA_VISIBLE_DEVICES=9999", "CUDA_VISIBLE_DEVICES=" + visible);
  EXPECT_NE(r.err.find("... (100000 bytes)"), std::string::npos);
  EXPECT_LT(r.err.size(), 1000u);
}

TEST_F(Faults, TerminalControlsInATopologysNamesAreRefused) {
  const std::string base = "description = \"d\"\nsource = \"s\"\n[host]\npinned_gbps = 25\npageable_gbps = 12\nlatency_us = 10\n"
                           "[[gpu]]\nname = \"G\"\npci_bus_id = \"00000000:01:00.0\"\nmemory_mib = 1024\ncontext_mib = 300\n"
                           "sm_count = 10\ncompute_capability = \"9.0\"\ntflops_fp32 = 1\ntflops_fp16 = 1\ntflops_bf16 = 1\n"
                           "memory_gbps = 100\nlaunch_latency_us = 5\n";
  const std::string esc = write_file("esc.toml", "name = \"red\\u001b[31m\"\n" + base);
  expect_one_line_error("devices --topology " + esc, "'name' contains a terminal control character (\\x1B at byte 4)");
  const std::string bidi = write_file("bidi.toml", "name = \"abc\\u202Eevil\"\n" + base);
  expect_one_line_error("devices --topology " + bidi, "'name' contains a terminal control character (\\xE2\\x80\\xAE at byte 4)");
}

}  // namespace
}  // namespace furnace::cli_test
