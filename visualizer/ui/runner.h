// furnace-viz runner: runs Scenarios on a training thread of its own, publishing into a LiveFeed.
// A restart stops the current run (its progress callback throws furnace::TrainingStopped after the
// current step) and starts the new one once the old has unwound; the UI thread never waits on it.
// A per-step delay (a control) slows training down so the animation can be followed.
// Not here: what the UI makes of the events (model.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "furnace/train.h"  // defines: Scenario
#include "live_feed.h"      // defines: LiveFeed

namespace furnace::viz {

struct RunRequest {
  Scenario scenario;
  std::optional<std::string> visible_devices;  // CUDA_VISIBLE_DEVICES of the run; nullopt: unset
  // A lesson step's run: after its last step it waits, tensors kept, until stopped or replaced,
  // so the panels show the state the step's checks read (a finished run has freed everything).
  std::string lesson_step;  // the step's id; empty: an ordinary run that finishes
};

// "MLP 784-512-512-10, batch 256, lr 0.1, 5 epochs on dgx-h100 (sim), cuda:0", or in Chinese.
std::string describe_scenario(const Scenario& sc, bool zh);

class Runner {
 public:
  // How the training thread (and the threads it starts, which inherit it) competes for the CPU:
  // `normal`; `low` (nice 10); `idle` (Linux SCHED_IDLE: it runs only on time the UI and the
  // software renderer leave, so frames stay on time; on a saturated machine training crawls).
  enum class Priority { normal, low, idle };
  // `blas_threads`: OpenBLAS threads for the simulator's GEMMs while training (0: leave as is);
  // 1 leaves the other cores to the UI.
  explicit Runner(LiveFeed& feed, Priority priority = Priority::normal, int blas_threads = 1);
  ~Runner();  // stops the current run and joins the thread
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Stops the current run (if any) and queues `request`; returns at once.
  void start(RunRequest request);
  // Stops the current run; returns at once.
  void stop();
  // Seconds the training thread sleeps after each optimizer step (0: full speed).
  void set_step_delay(double seconds) { delay_s_.store(seconds); }
  double step_delay() const { return delay_s_.load(); }
  // True while a run is loading or training (or queued).
  bool busy() const { return busy_.load(); }

 private:
  void loop();
  void run_one(const RunRequest& request, int generation);

  LiveFeed& feed_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<RunRequest> pending_;
  bool quit_ = false;
  bool stop_ = false;  // guarded by mu_
  int generation_ = 0;
  std::atomic<double> delay_s_{0.0};
  std::atomic<bool> busy_{false};
  Priority priority_ = Priority::normal;
  int blas_threads_ = 0;
  std::thread thread_;  // last: starts once everything above is set
};

}  // namespace furnace::viz
