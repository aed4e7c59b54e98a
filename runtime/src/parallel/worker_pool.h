// parallel/worker_pool: the threads parallel_apply hands its replicas to, kept alive between
// calls. PyTorch starts fresh threads on every parallel_apply; the simulator may not, because on
// a CPU the start of a thread is a real cost the GPU never pays: measured on 2 cores, four fresh
// threads per call made DataParallel's forward + backward over 4 simulated GPUs 1.4 ms slower
// per step (a new thread also meets OpenBLAS's per-thread buffers cold) than the same work on
// threads that wait for it. A child of fork() must exec before it runs DataParallel (the pool's
// threads stay in the parent). Not here: labelling a worker's failure (parallel_apply.cpp).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace furnace::parallel {

class WorkerPool {
 public:
  WorkerPool() = default;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool();  // wakes the workers, lets them finish, joins them

  // Runs job(0) on the calling thread and job(1) .. job(n - 1) on n - 1 pool threads (started on
  // first need, then reused), and returns once every one has returned. job must not throw.
  // Returns false without running anything when the pool is already running a job for another
  // caller (a nested or concurrent parallel_apply); the caller then brings its own threads.
  // Throws std::system_error if a needed thread cannot be started (nothing has run then).
  bool try_run(size_t n, const std::function<void(size_t)>& job);

  // The process's pool, shared by every parallel_apply.
  static WorkerPool& shared();

 private:
  // A pool thread: waits for a job newer than `seen`, runs job(slot + 1) when the job has one.
  void loop(size_t slot, uint64_t seen);

  std::mutex busy_;  // held by the caller of try_run for the whole run: one job at a time
  std::mutex mutex_;
  std::condition_variable wake_;  // a job was posted, or the pool is shutting down
  std::condition_variable done_;  // the last pool thread finished its part of the job
  std::vector<std::thread> threads_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t job_size_ = 0;
  uint64_t generation_ = 0;  // counts the jobs posted, so a thread never runs one twice
  size_t pending_ = 0;       // pool threads still running their part of the current job
  bool stop_ = false;
};

}  // namespace furnace::parallel
