// SIGKILL during a save: the real `furnace train` process, checkpointing after every optimizer
// step, is killed many times at varied moments, most of them while a save is in flight (its
// PATH.tmp exists). After every kill the last checkpoint must load; each run resumes from it;
// and the run that finally completes ends with the same bits as one that was never killed.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "furnace/checkpoint.h"
#include "furnace/error.h"

namespace furnace {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Starts `furnace args...` with stdout and stderr into `log` and no CUDA variables; returns its pid.
pid_t spawn(const std::vector<std::string>& args, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    ::unsetenv("CUDA_DEVICE_ORDER");
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(FURNACE_CLI));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(FURNACE_CLI, argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_for(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

bool same_bits(const Checkpoint& a, const Checkpoint& b) {
  if (a.model.size() != b.model.size() || a.momentum.size() != b.momentum.size()) return false;
  for (size_t i = 0; i < a.model.size(); ++i)
    if (a.model[i].values.size() != b.model[i].values.size() ||
        std::memcmp(a.model[i].values.data(), b.model[i].values.data(), a.model[i].values.size() * 4) != 0)
      return false;
  for (size_t i = 0; i < a.momentum.size(); ++i)
    if (std::memcmp(a.momentum[i].values.data(), b.momentum[i].values.data(), a.momentum[i].values.size() * 4) != 0)
      return false;
  return true;
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
  const std::string tmp = ck + ".tmp";
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
    fs::remove(tmp);  // so that a PATH.tmp after the kill can only be this run's unfinished save
    const pid_t pid = spawn(a, dir_ / "runs.log");
    // Follows the run through PATH.tmp appearing (a save starts) and disappearing (renamed);
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
    auto saving = [&] { return fs::exists(tmp); };
    auto not_saving = [&] { return !fs::exists(tmp); };
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
    const bool mid_save = fs::exists(tmp);  // opened and not yet renamed: the kill hit a save
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

}  // namespace
}  // namespace furnace
