// What the tests of ranks meeting over loopback sockets share (the store, the Gloo group, the
// ranks' reports): the address, a stopwatch and bytes <-> text for store values. Header-only.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace furnace::test_support {

inline constexpr const char* kLoopback = "127.0.0.1";  // every socket of these tests

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
inline std::string text(const std::vector<char>& b) { return {b.begin(), b.end()}; }

}  // namespace furnace::test_support
