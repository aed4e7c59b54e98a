// parallel/worker_pool: see worker_pool.h.
#include "parallel/worker_pool.h"

#include "parallel/spin_wait.h"

#include <pthread.h>

#include <cstdio>

namespace furnace::parallel {

WorkerPool& WorkerPool::shared() {
  static WorkerPool pool;
  return pool;
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool WorkerPool::try_run(size_t n, const std::function<void(size_t)>& job) {
  std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
  if (!busy.owns_lock()) return false;
  while (threads_.size() + 1 < n) {  // only this caller touches threads_ while it holds busy_
    // generation_ is only written by the holder of busy_, so it can be read here unlocked; the
    // new thread must start from it, not read it later, or it could miss the job posted below.
    threads_.emplace_back(&WorkerPool::loop, this, threads_.size(), generation_);
    // The name shows in a debugger and in top -H; failing to set it changes nothing.
    char name[16];  // the kernel keeps 15 characters
    std::snprintf(name, sizeof name, "furnace-dp%zu", threads_.size());
    (void)pthread_setname_np(threads_.back().native_handle(), name);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &job;
    job_size_ = n;
    pending_ = n - 1;
    ++generation_;
  }
  if (n > 1) wake_.notify_all();
  job(0);
  std::unique_lock<std::mutex> lock(mutex_);
  spin_then_wait(lock, done_, [&] { return pending_ == 0; });
  job_ = nullptr;
  return true;
}

void WorkerPool::loop(size_t slot, uint64_t seen) {
  for (;;) {
    const std::function<void(size_t)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      spin_then_wait(lock, wake_, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (slot + 1 >= job_size_) continue;  // this job needs fewer threads than the pool has
      job = job_;
    }
    (*job)(slot + 1);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace furnace::parallel
