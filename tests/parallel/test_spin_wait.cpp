// parallel/spin_wait: a waiter returns once another thread makes the condition true, whether that
// happens while it is still checking between yields or after it went to sleep on the condition
// variable; the timed form gives up at its timeout (false), counted from the call.
// This executable carries the ctest label "threads" (the tsan preset runs it).
#include "parallel/spin_wait.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace furnace::parallel {
namespace {

// Sets `flag` under the mutex after `delay` and notifies, on a thread of its own.
std::thread set_later(std::mutex& mu, std::condition_variable& cv, bool& flag, std::chrono::milliseconds delay) {
  return std::thread([&mu, &cv, &flag, delay] {
    std::this_thread::sleep_for(delay);
    {
      std::lock_guard<std::mutex> lock(mu);
      flag = true;
    }
    cv.notify_all();
  });
}

TEST(SpinWait, ReturnsWhenTheConditionTurnsTrueWhileSpinningOrAsleep) {
  for (auto delay : {std::chrono::milliseconds(0), std::chrono::milliseconds(30)}) {
    std::mutex mu;
    std::condition_variable cv;
    bool flag = false;
    std::thread setter = set_later(mu, cv, flag, delay);
    {
      std::unique_lock<std::mutex> lock(mu);
      spin_then_wait(lock, cv, [&] { return flag; });
      EXPECT_TRUE(flag);
    }
    setter.join();
  }
}

TEST(SpinWait, TheTimedWaitGivesUpAtItsTimeoutAndSeesALateTrue) {
  std::mutex mu;
  std::condition_variable cv;
  bool flag = false;
  std::unique_lock<std::mutex> lock(mu);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(spin_then_wait_for(lock, cv, std::chrono::milliseconds(20), [&] { return flag; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(20));
  lock.unlock();
  std::thread setter = set_later(mu, cv, flag, std::chrono::milliseconds(30));
  lock.lock();
  EXPECT_TRUE(spin_then_wait_for(lock, cv, std::chrono::seconds(30), [&] { return flag; }));
  lock.unlock();
  setter.join();
}

}  // namespace
}  // namespace furnace::parallel
