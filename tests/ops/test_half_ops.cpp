// The autocast (fp16 / bf16) ops: sim against ref, bit for bit where the arithmetic is the same and
// within one unit in the last place where fp32 summation order differs; overflow to inf and
// flush-to-zero happen in both.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "furnace/dtype.h"
#include "furnace/random.h"
#include "ops/ref/ref_ops.h"
#include "backend/cpu/cpu_kernels.h"

namespace furnace {
namespace {

std::vector<uint16_t> random_half(size_t n, uint64_t seed, DType dt, float scale = 1.0f) {
  Generator g(seed);
  std::vector<float> f(n);
  for (float& x : f) x = g.uniform(-scale, scale);
  std::vector<uint16_t> h(n);
  ref::cast_to_half(h.data(), f.data(), static_cast<int64_t>(n), dt);
  return h;
}

float value(uint16_t h, DType dt) { return dt == DType::bf16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h); }

// Distance in representable 16-bit values (same sign assumed for close numbers).
int ulps(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t h) { return (h & 0x8000u) ? -static_cast<int>(h & 0x7fffu) : static_cast<int>(h); };
  return std::abs(ordered(a) - ordered(b));
}

class HalfOps : public ::testing::TestWithParam<DType> {};

TEST_P(HalfOps, CastsAreTheExactConversions) {
  const DType dt = GetParam();
  std::vector<float> f = {0.0f, -0.0f, 1.0f, 1e-8f, 65504.0f, 65520.0f, 3.0e38f, NAN, -INFINITY};
  std::vector<uint16_t> a(f.size()), b(f.size());
  ref::cast_to_half(a.data(), f.data(), static_cast<int64_t>(f.size()), dt);
  cpu::cast_to_half(b.data(), f.data(), static_cast<int64_t>(f.size()), dt);
  EXPECT_EQ(a, b);
  if (dt == DType::f16) {
    EXPECT_EQ(a[5], 0x7c00u);  // 65520 rounds to inf in fp16: the overflow GradScaler catches
    EXPECT_EQ(a[3], 0x0000u);  // 1e-8 flushes to zero in fp16: the underflow it prevents
  } else {
    EXPECT_TRUE(std::isfinite(bf16_bits_to_f32(a[6])));  // bf16 has fp32's range
    EXPECT_NE(a[3], 0u);
  }
}

TEST_P(HalfOps, LinearForwardAndBackwardMatchRef) {
  const DType dt = GetParam();
  for (auto [B, C, OC] : {std::tuple{1, 1, 1}, std::tuple{3, 17, 5}, std::tuple{16, 64, 33}}) {
    auto x = random_half(static_cast<size_t>(B * C), 1, dt), w = random_half(static_cast<size_t>(OC * C), 2, dt),
         b = random_half(static_cast<size_t>(OC), 3, dt), g = random_half(static_cast<size_t>(B * OC), 4, dt);
    std::vector<uint16_t> yr(static_cast<size_t>(B * OC)), ys(yr.size());
    ref::linear_forward_half(yr.data(), x.data(), w.data(), b.data(), B, C, OC, dt);
    cpu::linear_forward_half(ys.data(), x.data(), w.data(), b.data(), B, C, OC, dt);
    for (size_t i = 0; i < yr.size(); ++i) EXPECT_LE(ulps(yr[i], ys[i]), 1) << "out " << i;

    std::vector<uint16_t> dxr(static_cast<size_t>(B * C)), dxs(dxr.size());
    std::vector<float> dwr(static_cast<size_t>(OC * C), 0.5f), dws = dwr, dbr(static_cast<size_t>(OC), -0.25f), dbs = dbr;
    ref::linear_backward_half(dxr.data(), dwr.data(), dbr.data(), g.data(), x.data(), w.data(), B, C, OC, dt);
    cpu::linear_backward_half(dxs.data(), dws.data(), dbs.data(), g.data(), x.data(), w.data(), B, C, OC, dt);
    for (size_t i = 0; i < dxr.size(); ++i) EXPECT_LE(ulps(dxr[i], dxs[i]), 1) << "dinp " << i;
    // The master grads receive 16-bit values: equal, or one 16-bit ulp apart.
    const float ulp = dt == DType::bf16 ? 1.0f / 128 : 1.0f / 1024;
    for (size_t i = 0; i < dwr.size(); ++i) EXPECT_NEAR(dwr[i], dws[i], ulp * (std::fabs(dwr[i] - 0.5f) + 1e-3f)) << "dweight " << i;
    for (size_t i = 0; i < dbr.size(); ++i) EXPECT_NEAR(dbr[i], dbs[i], ulp * (std::fabs(dbr[i] + 0.25f) + 1e-3f)) << "dbias " << i;
    // Without accumulate (a fresh .grad) both WRITE the gradients: equal to accumulating into zeros.
    for (bool use_sim : {false, true}) {
      auto run = use_sim ? cpu::linear_backward_half : ref::linear_backward_half;
      std::vector<float> zw(dwr.size(), 0.0f), zb(dbr.size(), 0.0f), gw(dwr.size(), std::nanf("")), gb(dbr.size(), 3.0f);
      run(nullptr, zw.data(), zb.data(), g.data(), x.data(), w.data(), B, C, OC, dt, true);
      run(nullptr, gw.data(), gb.data(), g.data(), x.data(), w.data(), B, C, OC, dt, false);
      EXPECT_EQ(gw, zw) << (use_sim ? "sim" : "ref") << " dweight";
      EXPECT_EQ(gb, zb) << (use_sim ? "sim" : "ref") << " dbias";
    }
  }
}

TEST_P(HalfOps, OverflowGivesInfInFp16Only) {
  const DType dt = GetParam();
  const int C = 64;
  auto x = random_half(C, 5, dt, 0.0f);  // zeros
  std::vector<uint16_t> w(C), out(1);
  std::vector<float> ones(C, 2000.0f), big(C, 2000.0f);
  ref::cast_to_half(x.data(), ones.data(), C, dt);
  ref::cast_to_half(w.data(), big.data(), C, dt);
  cpu::linear_forward_half(out.data(), x.data(), w.data(), nullptr, 1, C, 1, dt);  // 64 * 4e6
  if (dt == DType::f16)
    EXPECT_TRUE(std::isinf(value(out[0], dt)));
  else
    EXPECT_NEAR(value(out[0], dt), 2.56e8f, 2.56e8f / 128);
}

TEST_P(HalfOps, ReluKeepsNaNAndMatchesRef) {
  const DType dt = GetParam();
  std::vector<float> f = {-1.0f, 0.0f, -0.0f, 2.5f, NAN, -NAN, -INFINITY, INFINITY};
  std::vector<uint16_t> a(f.size()), b(f.size());
  ref::cast_to_half(a.data(), f.data(), 8, dt);
  b = a;
  ref::relu_forward_half(a.data(), 8, dt);
  cpu::relu_forward_half(b.data(), 8, dt);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(std::isnan(value(b[4], dt)) && std::isnan(value(b[5], dt)));
  EXPECT_EQ(value(b[0], dt), 0.0f);
  std::vector<uint16_t> da(8, 0x3c00u), db = da;  // gradient of ones (f16 1.0; any non-zero pattern)
  ref::relu_backward_half(da.data(), a.data(), 8, dt);
  cpu::relu_backward_half(db.data(), b.data(), 8, dt);
  EXPECT_EQ(da, db);
  EXPECT_EQ(db[3], 0x3c00u);  // 2.5 > 0 keeps its gradient
  EXPECT_EQ(db[7], 0x3c00u);  // +inf > 0 too
  EXPECT_EQ(db[4], 0u);       // NaN > 0 is false
}

TEST_P(HalfOps, ReluMatchesRefOnEveryPattern) {
  const DType dt = GetParam();
  std::vector<uint16_t> a(65536);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint16_t>(i);
  std::vector<uint16_t> b = a;
  ref::relu_forward_half(a.data(), 65536, dt);
  cpu::relu_forward_half(b.data(), 65536, dt);
  ASSERT_EQ(a, b);
  std::vector<uint16_t> out(65536), da(65536, 0x3c00u), db = da;  // every output pattern
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint16_t>(i);
  ref::relu_backward_half(da.data(), out.data(), 65536, dt);
  cpu::relu_backward_half(db.data(), out.data(), 65536, dt);
  ASSERT_EQ(da, db);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HalfOps, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace furnace
