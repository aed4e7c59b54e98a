// Runner: one training thread, a queue of one pending request, a stop flag checked after every
// step (and while sleeping the per-step delay).
#include "runner.h"

#include <pthread.h>       // defines: pthread_setschedparam
#include <sched.h>         // defines: SCHED_IDLE
#include <sys/resource.h>  // defines: setpriority
#include <sys/syscall.h>   // defines: SYS_gettid
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>

#include "furnace/error.h"     // defines: Error
#include "furnace/op_table.h"  // defines: CpuGemmThreadsScope

namespace furnace::viz {

std::string describe_scenario(const Scenario& sc, bool zh) {
  std::ostringstream os;
  os << "MLP 784";
  for (int h : sc.hidden) os << '-' << h;
  const char* sep = zh ? "，" : ", ";
  if (zh)
    os << "-10，batch " << sc.batch << "，lr " << sc.lr << "，" << sc.epochs << " 轮，在 " << sc.topology << "（"
       << sc.backend << "）上";
  else
    os << "-10, batch " << sc.batch << ", lr " << sc.lr << ", " << sc.epochs << " epoch" << (sc.epochs == 1 ? "" : "s")
       << " on " << sc.topology << " (" << sc.backend << ")";
  if (sc.parallel_mode() == ParallelMode::ddp) {  // torchrun: one process per GPU, rank r on cuda:r
    os << sep << "DistributedDataParallel" << sep;
    if (sc.nproc > 0)
      os << sc.nproc << (zh ? " 个进程" : sc.nproc == 1 ? " rank" : " ranks");
    else
      os << (zh ? "每块可见 GPU 一个进程" : "one rank per visible GPU");
  } else if (sc.parallel_mode() == ParallelMode::dp) {
    os << sep << "DataParallel" << sep << (zh ? "模型在 cuda:" : "model on cuda:") << sc.device << (zh ? " 上" : "");
  } else {
    os << sep << "cuda:" << sc.device;
  }
  return os.str();
}

Runner::Runner(LiveFeed& feed, Priority priority, int blas_threads)
    : feed_(feed), priority_(priority), blas_threads_(blas_threads), thread_([this] { loop(); }) {}

Runner::~Runner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
    stop_ = true;
    pending_.reset();
  }
  cv_.notify_all();
  thread_.join();
}

void Runner::start(RunRequest request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = std::move(request);
    stop_ = true;
    busy_.store(true);
  }
  cv_.notify_all();
}

void Runner::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.reset();
    stop_ = true;
  }
  cv_.notify_all();
}

void Runner::loop() {
  // Training yields to the UI: a lower priority for this thread and the threads it starts
  // (DataParallel's workers inherit it), so frames stay on time while the CPU is busy.
  if (priority_ == Priority::idle) {
    sched_param param{};
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &param) != 0)
      setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
  } else if (priority_ == Priority::low) {
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  }
  for (;;) {
    RunRequest request;
    int generation = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      busy_.store(pending_.has_value());
      cv_.wait(lock, [this] { return quit_ || pending_.has_value(); });
      if (quit_) return;
      request = std::move(*pending_);
      pending_.reset();
      stop_ = false;
      generation = ++generation_;
      busy_.store(true);
    }
    run_one(request, generation);
  }
}

void Runner::run_one(const RunRequest& request, int generation) {
  const Scenario& sc = request.scenario;
  RunStatus status;
  status.generation = generation;
  status.scenario = describe_scenario(sc, false);
  status.scenario_zh = describe_scenario(sc, true);
  status.accumulation = sc.accum;
  status.visible_devices = request.visible_devices.value_or("");
  status.amp = sc.amp;
  status.parallel = sc.parallel;
  status.hidden = sc.hidden;
  status.bucket_cap_mb = sc.bucket_cap_mb;
  status.lesson_step = request.lesson_step;
  status.state = RunStatus::State::loading;
  status.message = "loading the dataset";
  feed_.begin_run(sc.backend, status);

  TraceBus bus;
  const int sub = bus.subscribe([this](const TraceEvent& e) { feed_.on_event(e); });
  // The machine and the CUDA_VISIBLE_DEVICES map, as the run's first device use fixed them.
  const int process_sub = bus.subscribe_process([this](const ProcessRecord& p) { feed_.on_process(p); });
  bool running = false;
  ProgressFn progress = [&](const Progress& p) {
    feed_.on_progress(p);
    if (!running) {
      running = true;
      status.state = RunStatus::State::running;
      status.message.clear();
      feed_.set_status(status);
    }
    std::unique_lock<std::mutex> lock(mu_);
    const double delay = delay_s_.load();
    if (delay > 0)
      cv_.wait_for(lock, std::chrono::duration<double>(delay), [this] { return stop_; });
    if (!request.lesson_step.empty() && p.global_step >= p.total_steps && !stop_) {
      status.held = true;
      char line[160];
      std::snprintf(line, sizeof line, "held after the step's %lld optimizer step%s, tensors kept",
                    static_cast<long long>(p.global_step), p.global_step == 1 ? "" : "s");
      status.message = line;
      lock.unlock();
      feed_.set_status(status);
      lock.lock();
      cv_.wait(lock, [this] { return stop_; });
    }
    if (stop_) throw TrainingStopped();
  };
  try {
    std::optional<CpuGemmThreadsScope> blas;
    if (blas_threads_ > 0) blas.emplace(blas_threads_);
    const TrainResult r = train(sc, bus, progress);
    status.state = RunStatus::State::finished;
    char line[160];
    if (r.test_accuracy >= 0)
      std::snprintf(line, sizeof line, "finished: %lld steps, final loss %.4f, test accuracy %.4f",
                    static_cast<long long>(r.steps), r.final_loss, r.test_accuracy);
    else
      std::snprintf(line, sizeof line, "finished: %lld steps, final loss %.4f",
                    static_cast<long long>(r.steps), r.final_loss);
    status.message = line;
  } catch (const TrainingStopped&) {
    status.state = RunStatus::State::stopped;
    status.message = "stopped";
  } catch (const std::exception& e) {
    status.state = RunStatus::State::failed;
    status.message = e.what();
  }
  bus.unsubscribe(sub);
  bus.unsubscribe(process_sub);
  feed_.set_status(status);
}

}  // namespace furnace::viz
