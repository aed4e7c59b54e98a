// parallel/spin_wait: waiting for another thread that is about to be done, without sleeping at
// once. A thread that sleeps on a condition variable leaves its core idle, and on a virtual
// machine an idle vCPU halts: waking it again took about 0.4 ms on the 2-core build VM (perf
// sched: the woken rank's scheduling delay), longer than the work DDP's ranks wait for at the
// end of a step. So a waiter first checks between sched_yield()s, which hands the core to any
// other runnable thread (the ranks outnumber the cores) and otherwise keeps the vCPU awake, and
// sleeps only when the wait goes on (OpenBLAS's threads and OpenMP's spin-wait do the same).
#pragma once

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace furnace::parallel {

// How long a waiter checks before it sleeps: longer than a step's waits at the end of DDP's
// backward on the simulator, short against anything a person would notice.
inline constexpr std::chrono::microseconds kSpinBeforeSleep{2000};

namespace detail {
// Checks pred() (lock held) between yields until it holds or `until` passes.
template <class Pred>
bool spin(std::unique_lock<std::mutex>& lock, Pred& pred, std::chrono::steady_clock::time_point until) {
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    lock.unlock();
    sched_yield();
    lock.lock();
  }
  return true;
}
}  // namespace detail

// cv.wait(lock, pred), after checking pred() between yields for kSpinBeforeSleep.
template <class Pred>
void spin_then_wait(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, Pred pred) {
  if (!detail::spin(lock, pred, std::chrono::steady_clock::now() + kSpinBeforeSleep)) cv.wait(lock, pred);
}

// cv.wait_for(lock, timeout, pred), the timeout counted from the call, after the same checks.
template <class Pred, class Rep, class Period>
bool spin_then_wait_for(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                        std::chrono::duration<Rep, Period> timeout, Pred pred) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(timeout);
  if (detail::spin(lock, pred, std::min(deadline, start + kSpinBeforeSleep))) return true;
  return cv.wait_until(lock, deadline, pred);
}

}  // namespace furnace::parallel
