// parallel/gemm_exactness: see gemm_exactness.h.
#include "parallel/gemm_exactness.h"

#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "furnace/op_table.h"  // defines: cpu_linear_weight_grad, cpu_gemm_threads

namespace furnace::parallel {
namespace {

// Fixed operands with varied signs, magnitudes and exact zeros (ReLU outputs), from a xorshift.
std::vector<float> probe_values(size_t n, uint32_t seed, bool non_negative) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    const float mag = static_cast<float>(x % 4099) / 1031.0f * static_cast<float>(1 << (x >> 29));
    f = non_negative ? ((x >> 8) % 3 == 0 ? 0.0f : mag) : ((x >> 7) & 1 ? mag : -mag);
  }
  return v;
}

bool chain_probe(int out, int in, int64_t rows) {
  constexpr int kTerms = 3;
  const int k = static_cast<int>(rows);
  const size_t n = static_cast<size_t>(out) * static_cast<size_t>(in);
  std::vector<float> eager(n), term(n), chained(n);
  for (int t = 0; t < kTerms; ++t) {
    const std::vector<float> dout = probe_values(static_cast<size_t>(k) * out, 2 * t + 1, false);
    const std::vector<float> input = probe_values(static_cast<size_t>(k) * in, 2 * t + 2, true);
    cpu_linear_weight_grad(t == 0 ? eager.data() : term.data(), dout.data(), input.data(), k, in,
                           out, false);
    if (t > 0)
      for (size_t i = 0; i < n; ++i) eager[i] = eager[i] + term[i];
    cpu_linear_weight_grad(chained.data(), dout.data(), input.data(), k, in, out, t > 0);
  }
  return std::memcmp(eager.data(), chained.data(), n * sizeof(float)) == 0;
}

bool scaled_probe(int out, int in, int64_t rows, float alpha) {
  const int k = static_cast<int>(rows);
  const size_t n = static_cast<size_t>(out) * static_cast<size_t>(in);
  const std::vector<float> dout = probe_values(static_cast<size_t>(k) * out, 7, false);
  const std::vector<float> input = probe_values(static_cast<size_t>(k) * in, 8, true);
  std::vector<float> unfused(n), fused(n);
  cpu_linear_weight_grad(unfused.data(), dout.data(), input.data(), k, in, out, false);
  for (float& v : unfused) v = v * alpha;  // cpu::mul_scalar's arithmetic
  cpu_linear_weight_grad(fused.data(), dout.data(), input.data(), k, in, out, false, alpha);
  return std::memcmp(unfused.data(), fused.data(), n * sizeof(float)) == 0;
}

// One answer per key, computed under the lock the first time it is asked.
template <class Key, class Probe>
bool remembered(const Key& key, Probe probe) {
  static std::mutex mutex;
  static std::map<Key, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(key);
  if (it == known.end()) it = known.emplace(key, probe()).first;
  return it->second;
}

}  // namespace

bool chain_is_exact(int out, int in, int64_t rows) {
  return remembered(std::make_tuple(out, in, rows, cpu_gemm_threads()),
                    [&] { return rows > 0 && chain_probe(out, in, rows); });
}

bool scaled_is_exact(int out, int in, int64_t rows, float alpha) {
  return remembered(std::make_tuple(out, in, rows, cpu_gemm_threads(), alpha),
                    [&] { return rows > 0 && scaled_probe(out, in, rows, alpha); });
}

}  // namespace furnace::parallel
