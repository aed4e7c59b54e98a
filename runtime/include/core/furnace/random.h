// furnace/random.h: a small seeded generator (splitmix64) for initialisation and shuffling.
// Same seed, same numbers, on every platform (no std:: distributions, whose output varies).
#pragma once

#include <cstdint>

namespace furnace {

class Generator {
 public:
  explicit Generator(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 random bits, exact in float.
  float uniform() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n), without modulo bias.
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = next_u64(); while (x >= limit);
    return x % n;
  }

 private:
  uint64_t state_;
};

}  // namespace furnace
