// on_threads: the ranks of a process-group test, one thread each (as processes would be), each
// rank's error kept as its message. Header-only; for the tests of ProcessGroups (thread, Gloo,
// NCCL).
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace furnace::test_support {

// Runs body(rank) on one thread per rank; rethrows nothing, returns each rank's error ("" if none).
inline std::vector<std::string> on_threads(int world, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

}  // namespace furnace::test_support
