// SIGKILL during a save: the real `furnace train` process, checkpointing after every optimizer
// step, is killed many times at varied moments, most of them while a save is in flight (its
// temporary file exists). After every kill the last checkpoint must load; each run resumes from it;
// and the run that finally completes ends with the same bits as one that was never killed. Then
// the soak test: SIGKILL, SIGTERM and SIGINT at random, each followed by a resume. Both are
// end-to-end loops: the main CI workflow runs them, the ASan preset leaves them out (^CheckpointKill).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "furnace/checkpoint.h"
#include "furnace/error.h"
#include "integration/spawn.h"  // defines: spawn, wait_for

namespace furnace {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using cli_test::spawn;
using cli_test::wait_for;

bool same_bits(const Checkpoint& a, const Checkpoint& b) {
  if (a.model.size() != b.model.size() || a.optimizer_state.size() != b.optimizer_state.size()) return false;
  for (size_t i = 0; i < a.model.size(); ++i)
    if (a.model[i].values.size() != b.model[i].values.size() ||
        std::memcmp(a.model[i].values.data(), b.model[i].values.data(), a.model[i].values.size() * 4) != 0)
      return false;
  for (size_t i = 0; i < a.optimizer_state.size(); ++i)
    if (std::memcmp(a.optimizer_state[i].values.data(), b.optimizer_state[i].values.data(), a.optimizer_state[i].values.size() * 4) != 0)
      return false;
  return true;
}

// A save in flight: run.ckpt.tmp.XXXXXX (furnace/atomic_file.h) in `dir`.
bool has_temporary(const fs::path& dir) {
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("run.ckpt.tmp.", 0) == 0) return true;
  return false;
}
void remove_temporaries(const fs::path& dir) {
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("run.ckpt.tmp.", 0) == 0) fs::remove(e.path());
}

class CheckpointKill : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("furnace_kill_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CheckpointKill, TheLastGoodCheckpointAlwaysLoadsAndResumes) {
  // 2 epochs of 20 steps; a 784-256-256-10 model: each checkpoint is ~2.1 MB, written and
  // fsync'ed after every step, so a good part of the run is spent saving.
  const std::string data = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  const std::vector<std::string> scenario = {"train", "--quiet", "--no-eval", "--data", data, "--batch", "100",
                                             "--hidden", "256,256", "--epochs", "2", "--seed", "11"};
  const int64_t total = 40;
  const std::string ref = (dir_ / "reference.ckpt").string();
  std::vector<std::string> args = scenario;
  args.insert(args.end(), {"--checkpoint", ref});
  ASSERT_EQ(wait_for(spawn(args, dir_ / "reference.log")), 0);
  const Checkpoint reference = read_checkpoint(ref);
  ASSERT_EQ(reference.step, total);

  const std::string ck = (dir_ / "run.ckpt").string();
  std::mt19937 rng(20261202);
  int kills = 0, kills_mid_save = 0, finished_runs = 0;
  int64_t last_step = -1;
  for (int round = 0; round < 40 && kills < 12; ++round) {
    std::vector<std::string> a;
    if (fs::exists(ck)) {
      a = {"train", "--quiet", "--resume", ck};  // its scenario and --save-every 1 come from the file
    } else {
      a = scenario;
      a.insert(a.end(), {"--checkpoint", ck, "--save-every", "1"});
    }
    remove_temporaries(dir_);  // so that a temporary file after the kill can only be this run's save
    const pid_t pid = spawn(a, dir_ / "runs.log");
    // Follows the run through its temporary file appearing (a save starts) and disappearing (renamed);
    // false when the process ended by itself first.
    int status = -1;
    const auto deadline = Clock::now() + std::chrono::seconds(120);  // a loaded machine starts slowly
    auto wait_until = [&](const std::function<bool()>& cond) {
      while (!cond()) {
        int st = 0;
        if (::waitpid(pid, &st, WNOHANG) == pid) {
          status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
          return false;
        }
        if (Clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      return true;
    };
    auto saving = [&] { return has_temporary(dir_); };
    auto not_saving = [&] { return !has_temporary(dir_); };
    // Varied moments: after 0-2 more saves, at the start of a save, somewhere inside one (0-99
    // ms in, or just after it), or in the training step between two saves.
    bool running = true;
    for (int skip = static_cast<int>(rng() % 3); running && skip > 0; --skip)
      running = wait_until(saving) && wait_until(not_saving);
    const int moment = static_cast<int>(rng() % 4);
    if (running) running = wait_until(saving);
    if (running && moment == 1) std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 100));
    if (running && moment == 2) {
      running = wait_until(not_saving);
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));
    }
    if (status < 0) {
      ASSERT_LT(Clock::now(), deadline) << "round " << round << ": the trainer made no progress";
      if (::kill(pid, SIGKILL) == 0) ++kills;
      status = wait_for(pid);
    }
    if (status == 0) {
      ++finished_runs;  // it finished before the kill landed
      break;
    }
    ASSERT_EQ(status, 128 + SIGKILL) << "round " << round << ": the trainer failed on its own (see runs.log)";
    const bool mid_save = has_temporary(dir_);  // opened and not yet renamed: the kill hit a save
    if (mid_save) ++kills_mid_save;
    if (!fs::exists(ck)) continue;  // killed during its first save
    // The last good checkpoint loads (whatever the kill interrupted), and never goes backwards.
    Checkpoint got;
    ASSERT_NO_THROW(got = read_checkpoint(ck)) << "round " << round << (mid_save ? " (killed mid-save)" : "");
    EXPECT_GE(got.step, last_step);
    last_step = got.step;
    if (got.step == total) break;
  }
  // Finish from the last good checkpoint (unless a run already did), saving only at the end.
  if (!fs::exists(ck) || read_checkpoint(ck).step < total) {
    std::vector<std::string> a = {"train", "--quiet", "--resume", ck, "--save-every", "1000"};
    if (!fs::exists(ck)) {
      a = scenario;
      a.insert(a.end(), {"--checkpoint", ck});
    }
    ASSERT_EQ(wait_for(spawn(a, dir_ / "runs.log")), 0);
  }
  const Checkpoint final_state = read_checkpoint(ck);
  EXPECT_EQ(final_state.step, total);
  EXPECT_TRUE(same_bits(reference, final_state)) << "killed and resumed " << kills << " times";
  std::printf("[ kills ] %d kills, %d while a save was in flight, %d run(s) finished first, last step seen %lld\n",
              kills, kills_mid_save, finished_runs, static_cast<long long>(last_step));
  EXPECT_GE(kills, 10);
  EXPECT_GE(kills_mid_save, 3) << "the kills must land inside saves";
}


// The soak test (about a minute): 20 random SIGKILL / SIGTERM / SIGINT deliveries during a run that
// saves after every step and loads with two workers, each followed by a resume. SIGTERM and SIGINT
// must end the run after its step with a checkpoint of that step and one line (status 143 / 130);
// SIGKILL leaves the last save. The run finished at last equals the uninterrupted one, bit for bit.
TEST_F(CheckpointKill, SoakStopSignalsAndKillsThenResumeToTheSameBits) {
  const auto t_start = Clock::now();
  const std::string data = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  const std::vector<std::string> scenario = {"train", "--quiet", "--no-eval", "--data", data, "--batch", "100",
                                             "--hidden", "128", "--epochs", "25", "--seed", "5", "--workers", "2",
                                             "--save-every", "1"};
  const int64_t total = 500;
  const std::string ref = (dir_ / "reference.ckpt").string();
  std::vector<std::string> args = scenario;
  args.insert(args.end(), {"--checkpoint", ref});
  ASSERT_EQ(wait_for(spawn(args, dir_ / "reference.log")), 0) << "see " << (dir_ / "reference.log");
  const Checkpoint reference = read_checkpoint(ref);
  ASSERT_EQ(reference.step, total);

  const std::string ck = (dir_ / "run.ckpt").string();
  // The saves a run has made so far: each one renames a new file over the checkpoint (a new inode).
  auto inode = [&] {
    struct stat st {};
    return ::stat(ck.c_str(), &st) == 0 ? st.st_ino : ino_t{0};
  };
  std::mt19937 rng(20261203);
  const int signals[3] = {SIGKILL, SIGTERM, SIGINT};
  int deliveries = 0, stopped_cleanly = 0;
  for (int round = 0; deliveries < 20 && round < 40; ++round) {
    std::vector<std::string> a = {"train", "--quiet", "--resume", ck};  // workers, --save-every 1: the file's
    if (!fs::exists(ck)) {
      a = scenario;
      a.insert(a.end(), {"--checkpoint", ck});
    }
    const fs::path log = dir_ / ("round" + std::to_string(round) + ".log");
    const int sig = signals[rng() % 3];
    // SIGTERM and SIGINT only once the run has saved (its handlers are in place by then);
    // SIGKILL also at start-up.
    const int saves = static_cast<int>(rng() % 3) + (sig == SIGKILL ? 0 : 1);
    const auto pause = std::chrono::milliseconds(rng() % 30);
    const pid_t pid = spawn(a, log);
    int status = -1;
    ino_t last = inode();
    for (int seen = 0; seen < saves && status < 0;) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      const ino_t now = inode();
      if (now != last) ++seen, last = now;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      ASSERT_LT(Clock::now() - t_start, std::chrono::seconds(300)) << "the trainer made no progress";
    }
    if (status < 0) {
      std::this_thread::sleep_for(pause);
      ASSERT_EQ(::kill(pid, sig), 0);
      ++deliveries;
      status = wait_for(pid);
    }
    if (status == 0) break;  // it finished first
    const std::string out = [&] {
      std::ifstream f(log);
      return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }();
    if (sig == SIGKILL) {
      ASSERT_EQ(status, 128 + SIGKILL) << "round " << round << ": " << out;
      continue;
    }
    // Stopped cleanly: status 128 + N, one line naming the signal and the step, saved there.
    ASSERT_EQ(status, 128 + sig) << "round " << round << ": " << out;
    const std::string name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    const size_t at = out.find("furnace: stopped by " + name + " after step ");
    ASSERT_NE(at, std::string::npos) << "round " << round << ": " << out;
    // stdout (a resumed run's note) shares the log: the stop is the one stderr line, and the last.
    EXPECT_EQ(out.find("furnace: "), at) << out;
    EXPECT_EQ(out.find('\n', at), out.size() - 1) << out;
    const int64_t step = std::stoll(out.substr(at + 20 + name.size() + 12));
    EXPECT_NE(out.find("checkpoint saved to " + ck + ": continue with furnace train --resume " + ck), std::string::npos) << out;
    EXPECT_EQ(read_checkpoint(ck).step, step) << out;
    ++stopped_cleanly;
  }
  // Finish from the last checkpoint.
  std::vector<std::string> a = {"train", "--quiet", "--resume", ck};
  if (!fs::exists(ck)) {
    a = scenario;
    a.insert(a.end(), {"--checkpoint", ck});
  }
  if (!fs::exists(ck) || read_checkpoint(ck).step < total) ASSERT_EQ(wait_for(spawn(a, dir_ / "final.log")), 0);
  const Checkpoint final_state = read_checkpoint(ck);
  EXPECT_EQ(final_state.step, total);
  EXPECT_TRUE(same_bits(reference, final_state)) << deliveries << " signals";
  const double seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::printf("[ soak ] %d signals delivered (%d SIGTERM/SIGINT stops checked), %.1f s\n", deliveries,
              stopped_cleanly, seconds);
  EXPECT_EQ(deliveries, 20);
  EXPECT_GE(stopped_cleanly, 5);
}

}  // namespace
}  // namespace furnace
