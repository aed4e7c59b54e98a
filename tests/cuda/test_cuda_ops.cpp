// Every CUDA op against ops/ref, on odd sizes and every dtype it takes. Without a GPU every test
// reports SKIPPED. Tolerances, stated per op:
//  - GEMMs (Linear forward / backward): |cuda - ref| <= gamma(K) * M + 2 u_out |ref| + tiny, with M
//    the same product computed on the operands' magnitudes, gamma(K) = (K + 2) 2^-24 the bound of
//    any fp32 summation order of K terms (cuBLAS picks its own), u_out the output's unit roundoff
//    (0 for f32, 2^-11 for f16, 2^-8 for bf16; doubled because both sides round once, maybe to
//    neighbours), tiny the output type's smallest subnormal. TF32: + 2 * 2^-11 * M.
//  - softmax cross-entropy: probabilities and loss within 1e-5 relative (expf and fp32 sums
//    against the reference's double); its backward within 2 fp32 ulps given the same probs.
//  - relu, cast, add, SGD, AdamW, the unscale: bit-exact (the same float operations in the same
//    order, no FMA contraction), NaN compared as NaN.
//  - accuracy: the exact count, first maximum and NaN rows included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_support.h"
#include "furnace/error.h"
#include "furnace/random.h"
#include "ops/ref/ref_ops.h"

namespace furnace {
namespace {

using cuda_test::CudaMachine;
using cuda_test::download;
using cuda_test::download_bits;
using cuda_test::upload;

// ---- helpers ------------------------------------------------------------------------------------

float round_to(float v, DType dt) {
  return dt == DType::f16 ? round_to_f16(v) : dt == DType::bf16 ? round_to_bf16(v) : v;
}

// Random values already representable in dt (so host and device start from the same numbers).
std::vector<float> random_vals(size_t n, uint64_t seed, DType dt, float lo = -1.0f, float hi = 1.0f) {
  Generator g(seed);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(g.uniform(lo, hi), dt);
  return v;
}

std::vector<uint16_t> to_bits(const std::vector<float>& v, DType dt) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = dt == DType::f16 ? f32_to_f16_bits(v[i]) : f32_to_bf16_bits(v[i]);
  return b;
}

std::vector<float> from_bits(const std::vector<uint16_t>& b, DType dt) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = dt == DType::f16 ? f16_bits_to_f32(b[i]) : bf16_bits_to_f32(b[i]);
  return v;
}

std::vector<float> abs_of(std::vector<float> v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

double gamma(int64_t k) { return static_cast<double>(k + 2) * std::ldexp(1.0, -24); }
double unit_roundoff(DType dt) {
  return dt == DType::f16 ? std::ldexp(1.0, -11) : dt == DType::bf16 ? std::ldexp(1.0, -8) : 0.0;
}
double smallest(DType dt) {
  return dt == DType::f16 ? std::ldexp(1.0, -24) : dt == DType::bf16 ? 1e-40 : 1e-45;
}

// |got - want| <= tol(i) for every element.
template <class Tol>
void expect_within(const std::vector<float>& got, const std::vector<float>& want, Tol tol,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(static_cast<double>(got[i]) - want[i]), tol(i))
        << what << "[" << i << "]: cuda " << got[i] << ", ref " << want[i];
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << "[" << i << "]";
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    ASSERT_EQ(a, b) << what << "[" << i << "]: cuda " << got[i] << ", ref " << want[i];
  }
}

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FURNACE_REQUIRE_CUDA_DEVICES(1);
    m = std::make_unique<CudaMachine>();
  }
  Runtime& rt() { return m->rt; }
  OpContext ctx() { return OpContext{m->rt, 0, 0}; }
  std::unique_ptr<CudaMachine> m;
};

// ---- Linear (cuBLAS) ----------------------------------------------------------------------------

using LinearCase = std::tuple<DType, int, int, int>;  // dtype, B, C, OC

class CudaLinear : public CudaOpsTest, public ::testing::WithParamInterface<LinearCase> {};

TEST_P(CudaLinear, ForwardMatchesRef) {
  const auto [dt, B, C, OC] = GetParam();
  const auto x = random_vals(static_cast<size_t>(B) * C, 1, dt), w = random_vals(static_cast<size_t>(OC) * C, 2, dt);
  const auto b = random_vals(static_cast<size_t>(OC), 3, dt);
  OpContext c = ctx();
  Tensor y = Tensor::empty(rt(), Device::cuda(0), {B, OC}, dt);
  ops::linear_forward(c, y, upload(rt(), 0, x, {B, C}, dt), upload(rt(), 0, w, {OC, C}, dt), upload(rt(), 0, b, {OC}, dt));
  const std::vector<float> got = download(rt(), y);
  std::vector<float> want(got.size()), mag(got.size());
  if (dt == DType::f32) {
    ref::linear_forward(want.data(), x.data(), w.data(), b.data(), B, C, OC);
  } else {
    std::vector<uint16_t> out(got.size());
    ref::linear_forward_half(out.data(), to_bits(x, dt).data(), to_bits(w, dt).data(), to_bits(b, dt).data(), B, C, OC, dt);
    want = from_bits(out, dt);
  }
  ref::linear_forward(mag.data(), abs_of(x).data(), abs_of(w).data(), abs_of(b).data(), B, C, OC);
  expect_within(got, want, [&](size_t i) {
    return gamma(C + 1) * mag[i] + 2 * unit_roundoff(dt) * std::fabs(want[i]) + smallest(dt);
  }, "out");
}

TEST_P(CudaLinear, BackwardMatchesRef) {
  const auto [dt, B, C, OC] = GetParam();
  const auto x = random_vals(static_cast<size_t>(B) * C, 4, dt), w = random_vals(static_cast<size_t>(OC) * C, 5, dt);
  const auto dout = random_vals(static_cast<size_t>(B) * OC, 6, dt);
  const auto dw0 = random_vals(static_cast<size_t>(OC) * C, 7, DType::f32), db0 = random_vals(static_cast<size_t>(OC), 8, DType::f32);
  OpContext c = ctx();
  Tensor dinp = Tensor::empty(rt(), Device::cuda(0), {B, C}, dt);
  Tensor dw = upload(rt(), 0, dw0, {OC, C}), db = upload(rt(), 0, db0, {OC});
  ops::linear_backward(c, &dinp, dw, db, upload(rt(), 0, dout, {B, OC}, dt), upload(rt(), 0, x, {B, C}, dt),
                       upload(rt(), 0, w, {OC, C}, dt));
  std::vector<float> want_dinp(static_cast<size_t>(B) * C), want_dw = dw0, want_db = db0;
  if (dt == DType::f32) {
    ref::linear_backward(want_dinp.data(), want_dw.data(), want_db.data(), dout.data(), x.data(), w.data(), B, C, OC);
  } else {
    std::vector<uint16_t> out(want_dinp.size());
    ref::linear_backward_half(out.data(), want_dw.data(), want_db.data(), to_bits(dout, dt).data(),
                              to_bits(x, dt).data(), to_bits(w, dt).data(), B, C, OC, dt);
    want_dinp = from_bits(out, dt);
  }
  std::vector<float> mag_dinp(want_dinp.size()), mag_dw(want_dw.size(), 0.0f), mag_db(want_db.size(), 0.0f);
  ref::linear_backward(mag_dinp.data(), mag_dw.data(), mag_db.data(), abs_of(dout).data(), abs_of(x).data(),
                       abs_of(w).data(), B, C, OC);
  const double u = unit_roundoff(dt), f32_add = std::ldexp(1.0, -23);
  expect_within(download(rt(), dinp), want_dinp, [&](size_t i) {
    return gamma(OC) * mag_dinp[i] + 2 * u * std::fabs(want_dinp[i]) + smallest(dt);
  }, "grad_input");
  // The weight and bias gradients: a sum over B (rounded to dt first for 16-bit), then added to fp32.
  expect_within(download(rt(), dw), want_dw, [&](size_t i) {
    return (gamma(B) + 2 * u) * mag_dw[i] + f32_add * std::fabs(want_dw[i]) + smallest(dt);
  }, "grad_weight");
  expect_within(download(rt(), db), want_db, [&](size_t i) {
    return (gamma(B) + 2 * u) * mag_db[i] + f32_add * std::fabs(want_db[i]) + smallest(dt);
  }, "grad_bias");
}

INSTANTIATE_TEST_SUITE_P(
    OddSizes, CudaLinear,
    ::testing::Combine(::testing::Values(DType::f32, DType::f16, DType::bf16),
                       ::testing::Values(1, 37, 300), ::testing::Values(1, 83, 784),
                       ::testing::Values(1, 29, 130)),
    [](const ::testing::TestParamInfo<LinearCase>& i) {
      return std::string(dtype_name(std::get<0>(i.param))) + "_B" + std::to_string(std::get<1>(i.param)) + "_C" +
             std::to_string(std::get<2>(i.param)) + "_OC" + std::to_string(std::get<3>(i.param));
    });

TEST_F(CudaOpsTest, EmptyBatchLinearLeavesGradientsAlone) {
  OpContext c = ctx();
  const int C = 5, OC = 3;
  Tensor x = Tensor::empty(rt(), Device::cuda(0), {0, C}), y = Tensor::empty(rt(), Device::cuda(0), {0, OC});
  Tensor w = upload(rt(), 0, random_vals(OC * C, 1, DType::f32), {OC, C}), b = upload(rt(), 0, {1, 2, 3}, {OC});
  ops::linear_forward(c, y, x, w, b);
  Tensor dw = upload(rt(), 0, std::vector<float>(OC * C, 0.5f), {OC, C}), db = upload(rt(), 0, {1, 2, 3}, {OC});
  Tensor dinp = Tensor::empty(rt(), Device::cuda(0), {0, C});
  ops::linear_backward(c, &dinp, dw, db, y, x, w);
  EXPECT_EQ(download(rt(), dw), std::vector<float>(OC * C, 0.5f));
  EXPECT_EQ(download(rt(), db), (std::vector<float>{1, 2, 3}));
}

// cuBLAS's workspace as PyTorch takes it: from the caching allocator at the device's first GEMM,
// 32 MiB on compute capability 9.0 and 8519680 bytes elsewhere, once (CUBLAS_WORKSPACE_CONFIG
// unset in the test environment).
TEST_F(CudaOpsTest, TheFirstGemmTakesCublassWorkspaceFromTheCachingAllocatorOnce) {
  if (std::getenv("CUBLAS_WORKSPACE_CONFIG")) GTEST_SKIP() << "CUBLAS_WORKSPACE_CONFIG is set";
  OpContext c = ctx();
  const int B = 8, C = 16, OC = 4;
  Tensor x = upload(rt(), 0, random_vals(B * C, 3, DType::f32), {B, C});
  Tensor w = upload(rt(), 0, random_vals(OC * C, 4, DType::f32), {OC, C});
  Tensor b = upload(rt(), 0, random_vals(OC, 5, DType::f32), {OC});
  Tensor y = Tensor::empty(rt(), Device::cuda(0), {B, OC});
  const size_t before = rt().memory_allocated(0);
  ops::linear_forward(c, y, x, w, b);
  const GpuSpec& g = rt().get_device_properties(0);
  const size_t expected = g.compute_capability_major == 9 && g.compute_capability_minor == 0 ? 33554432u : 8519680u;
  EXPECT_EQ(rt().memory_allocated(0) - before, expected);
  ops::linear_forward(c, y, x, w, b);
  EXPECT_EQ(rt().memory_allocated(0) - before, expected) << "one workspace per device";
  std::vector<float> ref(B * OC);
  ref::linear_forward(ref.data(), download(rt(), x).data(), download(rt(), w).data(), download(rt(), b).data(), B, C, OC);
  const std::vector<float> got = download(rt(), y);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5f) << i;
}

TEST_F(CudaOpsTest, Tf32IsOffByDefaultAndWithinTf32BoundsWhenAllowed) {
  EXPECT_FALSE(ops::allow_tf32(rt()));
  ops::set_allow_tf32(rt(), true);
  EXPECT_TRUE(ops::allow_tf32(rt()));
  const int B = 64, C = 257, OC = 33;
  const auto x = random_vals(B * C, 9, DType::f32), w = random_vals(OC * C, 10, DType::f32), b = random_vals(OC, 11, DType::f32);
  OpContext c = ctx();
  Tensor y = Tensor::empty(rt(), Device::cuda(0), {B, OC});
  ops::linear_forward(c, y, upload(rt(), 0, x, {B, C}), upload(rt(), 0, w, {OC, C}), upload(rt(), 0, b, {OC}));
  std::vector<float> want(B * OC), mag(B * OC);
  ref::linear_forward(want.data(), x.data(), w.data(), b.data(), B, C, OC);
  ref::linear_forward(mag.data(), abs_of(x).data(), abs_of(w).data(), abs_of(b).data(), B, C, OC);
  expect_within(download(rt(), y), want, [&](size_t i) { return (gamma(C + 1) + 2 * std::ldexp(1.0, -11)) * mag[i]; }, "tf32 out");
  ops::set_allow_tf32(rt(), false);
}

// ---- elementwise ----------------------------------------------------------------------------------

std::vector<float> specials() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  return {0.0f, -0.0f, 1.0f, -1.0f, 1e-8f, -1e-8f, 65504.0f, 65520.0f, -70000.0f, 3.0e38f,
          inf, -inf, nan, -nan, 5.96e-8f, 1.0e-40f, 0.1f, -2.5f, 1234.5678f};
}

TEST_F(CudaOpsTest, ReluForwardAndBackwardAreBitExactInEveryDtype) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    std::vector<float> v = specials();
    for (float x : random_vals(5003, 12, dt, -3, 3)) v.push_back(x);
    for (float& x : v) x = round_to(x, dt);
    OpContext c = ctx();
    Tensor t = upload(rt(), 0, v, {static_cast<int64_t>(v.size())}, dt);
    ops::relu_forward(c, t);
    Tensor dx = upload(rt(), 0, random_vals(v.size(), 13, dt), {static_cast<int64_t>(v.size())}, dt);
    const std::vector<float> dx0 = download(rt(), dx);
    ops::relu_backward(c, dx, t);
    std::vector<float> want = v, want_dx = dx0;
    if (dt == DType::f32) {
      ref::relu_forward(want.data(), static_cast<int64_t>(want.size()));
      ref::relu_backward(want_dx.data(), want.data(), static_cast<int64_t>(want.size()));
    } else {
      std::vector<uint16_t> bits = to_bits(v, dt), dbits = to_bits(dx0, dt);
      ref::relu_forward_half(bits.data(), static_cast<int64_t>(bits.size()), dt);
      ref::relu_backward_half(dbits.data(), bits.data(), static_cast<int64_t>(bits.size()), dt);
      want = from_bits(bits, dt);
      want_dx = from_bits(dbits, dt);
    }
    expect_same_bits(download(rt(), t), want, "relu");
    expect_same_bits(download(rt(), dx), want_dx, "relu_backward");
  }
}

TEST_F(CudaOpsTest, CastsRoundToNearestEvenBitForBit) {
  for (DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    std::vector<float> v = specials();
    for (float x : random_vals(4099, 14, DType::f32, -70000, 70000)) v.push_back(x);
    for (float x : random_vals(1000, 15, DType::f32, -1e-6f, 1e-6f)) v.push_back(x);  // subnormal f16
    const int64_t n = static_cast<int64_t>(v.size());
    OpContext c = ctx();
    Tensor in = upload(rt(), 0, v, {n});
    Tensor half = Tensor::empty(rt(), Device::cuda(0), {n}, dt);
    ops::cast(c, half, in);
    std::vector<uint16_t> want(v.size());
    ref::cast_to_half(want.data(), v.data(), n, dt);
    const std::vector<uint16_t> got = download_bits(rt(), half);
    for (size_t i = 0; i < want.size(); ++i) {
      const float w = from_bits({want[i]}, dt)[0];
      if (std::isnan(w))  // a NaN stays a NaN; its payload is the hardware's business
        ASSERT_TRUE(std::isnan(from_bits({got[i]}, dt)[0])) << "element " << i;
      else
        ASSERT_EQ(got[i], want[i]) << "element " << i << " (" << v[i] << ")";
    }
    Tensor back = Tensor::empty(rt(), Device::cuda(0), {n});
    ops::cast(c, back, half);
    std::vector<float> want_back(v.size());
    ref::cast_from_half(want_back.data(), want.data(), n, dt);
    expect_same_bits(download(rt(), back), want_back, "cast back");
  }
}

TEST_F(CudaOpsTest, AddIsBitExactAndMayAlias) {
  const int64_t n = 100003;
  const auto a = random_vals(n, 16, DType::f32), b = random_vals(n, 17, DType::f32, -1e-3f, 1e-3f);
  OpContext c = ctx();
  Tensor ta = upload(rt(), 0, a, {n}), tb = upload(rt(), 0, b, {n});
  ops::add(c, ta, ta, tb);  // a.add_(b)
  std::vector<float> want(n);
  ref::add(want.data(), a.data(), b.data(), n);
  expect_same_bits(download(rt(), ta), want, "add");
}

// ---- loss and accuracy ----------------------------------------------------------------------------

class CudaLoss : public CudaOpsTest, public ::testing::WithParamInterface<std::tuple<int, int>> {};

TEST_P(CudaLoss, SoftmaxCrossEntropyForwardAndBackward) {
  const auto [B, V] = GetParam();
  const auto logits = random_vals(static_cast<size_t>(B) * V, 18, DType::f32, -8, 8);
  std::vector<int32_t> targets(static_cast<size_t>(B));
  Generator g(19);
  for (int32_t& t : targets) t = static_cast<int32_t>(g.below(static_cast<uint64_t>(V)));
  OpContext c = ctx();
  Tensor tl = upload(rt(), 0, logits, {B, V});
  Tensor tt = Tensor::empty(rt(), Device::cuda(0), {B}, DType::i32);
  ops::copy_to_device(c, tt, targets.data());
  Tensor probs = Tensor::empty(rt(), Device::cuda(0), {B, V});
  const float loss = ops::softmax_cross_entropy_forward(c, probs, tl, tt);
  std::vector<float> want_probs(logits.size());
  const float want_loss = ref::softmax_cross_entropy_forward(want_probs.data(), logits.data(), targets.data(), B, V);
  EXPECT_NEAR(loss, want_loss, 1e-5 * std::fabs(want_loss) + 1e-6);
  const std::vector<float> got_probs = download(rt(), probs);
  expect_within(got_probs, want_probs, [&](size_t i) { return 1e-5 * want_probs[i] + 1e-9; }, "probs");
  Tensor dl = Tensor::empty(rt(), Device::cuda(0), {B, V});
  ops::softmax_cross_entropy_backward(c, dl, probs, tt, 0.75f);
  std::vector<float> want_dl(logits.size());  // the reference backward of the device's own probs
  ref::softmax_cross_entropy_backward(want_dl.data(), got_probs.data(), targets.data(), B, V, 0.75f);
  expect_within(download(rt(), dl), want_dl, [&](size_t i) { return 2.5e-7 * std::fabs(want_dl[i]) + 1e-12; }, "dlogits");
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaLoss,
                         ::testing::Values(std::make_tuple(1, 1), std::make_tuple(37, 10),
                                           std::make_tuple(256, 10), std::make_tuple(300, 257),
                                           std::make_tuple(5, 33)));

TEST_F(CudaOpsTest, AnOutOfRangeTargetIsAnErrorAndTheDeviceStaysUsable) {
  OpContext c = ctx();
  Tensor tl = upload(rt(), 0, random_vals(30, 20, DType::f32), {3, 10});
  Tensor tt = Tensor::empty(rt(), Device::cuda(0), {3}, DType::i32);
  std::vector<int32_t> bad{1, 10, 2};
  ops::copy_to_device(c, tt, bad.data());
  Tensor probs = Tensor::empty(rt(), Device::cuda(0), {3, 10});
  try {
    ops::softmax_cross_entropy_forward(c, probs, tl, tt);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "Target 10 is out of bounds.");
    EXPECT_EQ(e.device(), 0);
  }
  std::vector<int32_t> good{1, 9, 2};
  ops::copy_to_device(c, tt, good.data());
  EXPECT_TRUE(std::isfinite(ops::softmax_cross_entropy_forward(c, probs, tl, tt)));
}

TEST_F(CudaOpsTest, AccuracyCountsFirstMaximaExactly) {
  const int B = 1000, V = 10;
  auto logits = random_vals(B * V, 21, DType::f32, -2, 2);
  for (int b = 0; b < B; b += 7) logits[static_cast<size_t>(b * V + 3)] = logits[static_cast<size_t>(b * V + 5)] = 9.0f;  // ties
  logits[static_cast<size_t>(11 * V + 0)] = std::numeric_limits<float>::quiet_NaN();  // a NaN first
  logits[static_cast<size_t>(12 * V + 4)] = std::numeric_limits<float>::quiet_NaN();  // a NaN inside
  std::vector<int32_t> targets(B);
  Generator g(22);
  for (int32_t& t : targets) t = static_cast<int32_t>(g.below(V));
  for (int b = 0; b < B; b += 14) targets[static_cast<size_t>(b)] = 3;  // the first of the tied maxima
  OpContext c = ctx();
  Tensor tt = Tensor::empty(rt(), Device::cuda(0), {B}, DType::i32);
  ops::copy_to_device(c, tt, targets.data());
  EXPECT_EQ(ops::accuracy_count(c, upload(rt(), 0, logits, {B, V}), tt),
            ref::accuracy_count(logits.data(), targets.data(), B, V));
}

// ---- optimizers and the GradScaler's kernel ------------------------------------------------------

TEST_F(CudaOpsTest, SgdMomentumIsBitExactOverSteps) {
  for (const int64_t n : {int64_t{1037}, int64_t{5000011}}) {  // the large one runs grid-stride
    for (const float momentum : {0.0f, 0.9f}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " momentum=" + std::to_string(momentum));
      auto p = random_vals(static_cast<size_t>(n), 23, DType::f32);
      std::vector<float> buf(static_cast<size_t>(n), 0.0f);
      OpContext c = ctx();
      Tensor tp = upload(rt(), 0, p, {n});
      Tensor tb = momentum != 0.0f ? Tensor::empty(rt(), Device::cuda(0), {n}) : Tensor();
      for (int step = 0; step < 3; ++step) {
        const auto grad = random_vals(static_cast<size_t>(n), 30 + static_cast<uint64_t>(step), DType::f32);
        ops::sgd_momentum_step(c, tp, upload(rt(), 0, grad, {n}), tb, 0.05f, momentum, 1e-4f, step == 0);
        ref::sgd_momentum_step(p.data(), grad.data(), momentum != 0.0f ? buf.data() : nullptr, n, 0.05f, momentum, 1e-4f, step == 0);
      }
      expect_same_bits(download(rt(), tp), p, "param");
      if (momentum != 0.0f) expect_same_bits(download(rt(), tb), buf, "momentum_buffer");
    }
  }
}

TEST_F(CudaOpsTest, AdamWIsBitExactOverSteps) {
  for (const float beta1 : {0.9f, 0.3f}) {  // lerp's two forms
    const int64_t n = 4099;
    auto p = random_vals(n, 40, DType::f32);
    std::vector<float> m1(n, 0.0f), m2(n, 0.0f);
    OpContext c = ctx();
    Tensor tp = upload(rt(), 0, p, {n}), t1 = upload(rt(), 0, m1, {n}), t2 = upload(rt(), 0, m2, {n});
    for (int64_t step = 1; step <= 4; ++step) {
      const auto grad = random_vals(n, 50 + static_cast<uint64_t>(step), DType::f32, -3, 3);
      ops::adamw_step(c, tp, upload(rt(), 0, grad, {n}), t1, t2, 1e-3f, beta1, 0.999f, 1e-8f, 0.01f, step);
      ref::adamw_step(p.data(), grad.data(), m1.data(), m2.data(), n, 1e-3f, beta1, 0.999f, 1e-8f, 0.01f, step);
    }
    expect_same_bits(download(rt(), tp), p, "param");
    expect_same_bits(download(rt(), t1), m1, "exp_avg");
    expect_same_bits(download(rt(), t2), m2, "exp_avg_sq");
  }
}

TEST_F(CudaOpsTest, NonFiniteCheckAndUnscaleIsOneFusedPass) {
  const int64_t n = 1 << 20;
  OpContext c = ctx();
  for (const float inv_scale : {0.5f, 1.0f}) {
    SCOPED_TRACE(inv_scale);
    auto clean = random_vals(n, 60, DType::f32, -1e4f, 1e4f);
    Tensor g = upload(rt(), 0, clean, {n});
    Tensor found = upload(rt(), 0, {0.0f}, {1});
    ops::non_finite_check_and_unscale(c, g, inv_scale, found);
    float want_found = 0.0f;
    ref::non_finite_check_and_unscale(clean.data(), n, inv_scale, &want_found);
    EXPECT_EQ(download(rt(), found)[0], 0.0f);
    expect_same_bits(download(rt(), g), clean, "clean grad");

    auto dirty = random_vals(n, 61, DType::f32);
    dirty[12345] = std::numeric_limits<float>::infinity();
    dirty[n - 1] = std::numeric_limits<float>::quiet_NaN();
    Tensor gd = upload(rt(), 0, dirty, {n});
    ops::non_finite_check_and_unscale(c, gd, inv_scale, found);
    ref::non_finite_check_and_unscale(dirty.data(), n, inv_scale, &want_found);
    EXPECT_EQ(download(rt(), found)[0], 1.0f);
    expect_same_bits(download(rt(), gd), dirty, "dirty grad");  // every element still scaled
    ops::non_finite_check_and_unscale(c, g, 1.0f, found);      // a clean one leaves the flag set
    EXPECT_EQ(download(rt(), found)[0], 1.0f);
  }
}

// ---- copies ---------------------------------------------------------------------------------------

TEST_F(CudaOpsTest, PinnedCopiesLandInStreamOrder) {
  // Each pinned copy overwrites x on the copy stream while the compute stream reads the previous
  // x: without the two stream waits the sum would mix batches.
  const int64_t n = 200003;
  OpContext c = ctx();
  Tensor x = Tensor::empty(rt(), Device::cuda(0), {n});
  Tensor acc = upload(rt(), 0, std::vector<float>(n, 0.0f), {n});
  std::vector<float> want(n, 0.0f);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> batch(n, static_cast<float>(i + 1));
    ops::copy_to_device(c, x, batch.data(), /*pinned=*/true);
    ops::add(c, acc, acc, x);
    for (float& w : want) w += static_cast<float>(i + 1);
  }
  EXPECT_EQ(download(rt(), acc), want);
}

TEST_F(CudaOpsTest, CatFlatAndMemsetOnTheDevice) {
  OpContext c = ctx();
  std::vector<Tensor> parts{upload(rt(), 0, {1, 2, 3}, {3}), upload(rt(), 0, {4, 5, 6, 7}, {2, 2})};
  Tensor flat = Tensor::empty(rt(), Device::cuda(0), {7});
  ops::cat_flat(c, flat, parts);
  EXPECT_EQ(download(rt(), flat), (std::vector<float>{1, 2, 3, 4, 5, 6, 7}));
  ops::zero(c, flat);
  EXPECT_EQ(download(rt(), flat), std::vector<float>(7, 0.0f));
}

}  // namespace
}  // namespace furnace
