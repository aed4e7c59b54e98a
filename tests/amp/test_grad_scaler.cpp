// GradScaler against PyTorch's rules (semantics.md section 3): messages, the per-device found_inf,
// the skip rule, the scale sequence, disabled mode, state_dict; and the unscale kernel, sim vs ref.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "furnace/amp.h"
#include "furnace/error.h"
#include "furnace/topology.h"
#include "ops/ref/ref_ops.h"
#include "backend/cpu/cpu_kernels.h"

namespace furnace {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct ScalerFixture : ::testing::Test {
  TraceBus bus;
  Runtime rt{make_sim_backend(load_topology("workstation-4x3090"), &bus), bus};
  OpContext ctx{rt, 0, 0};
  Tensor w0 = Tensor::empty(rt, Device::cuda(0), {3});
  Tensor w1 = Tensor::empty(rt, Device::cuda(1), {3});
  Tensor g0, g1;

  void set_grad(Tensor& g, int device, std::vector<float> values) {
    g = Tensor::empty(rt, Device::cuda(device), {3});
    OpContext c{rt, device, 0};
    ops::copy_to_device(c, g, values.data());
  }
  std::vector<float> host(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    OpContext c{rt, t.device().index, 0};
    ops::copy_to_host(c, v.data(), t);
    return v;
  }
  void SetUp() override {
    OpContext c1{rt, 1, 0};
    ops::zero(ctx, w0);
    ops::zero(c1, w1);
  }
};

TEST(GradScalerRules, ConstructorChecksAndDefaults) {
  GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  GradScalerOptions bad;
  bad.growth_factor = 1.0;
  EXPECT_EQ(error_of([&] { GradScaler x(bad); }), "The growth factor must be > 1.0.");
  bad = {};
  bad.backoff_factor = 1.0;
  EXPECT_EQ(error_of([&] { GradScaler x(bad); }), "The backoff factor must be < 1.0.");
  bad.enabled = false;  // a disabled scaler does not check
  EXPECT_NO_THROW(GradScaler x(bad));
}

// An independent statement of _amp_update_scale_ to compare the replay with.
std::vector<double> expected_scales(int64_t steps, const std::set<int64_t>& overflow, double init,
                                    int64_t interval) {
  std::vector<double> out;
  float scale = static_cast<float>(init);
  int64_t tracker = 0;
  for (int64_t s = 1; s <= steps; ++s) {
    out.push_back(scale);
    if (overflow.count(s)) {
      scale = static_cast<float>(scale * 0.5);
      tracker = 0;
    } else if (++tracker == interval) {
      float c = static_cast<float>(scale * 2.0);
      if (std::isfinite(c)) scale = c;
      tracker = 0;
    }
  }
  return out;
}

TEST(GradScalerRules, ReplayFollowsTheUpdateRule) {
  for (int64_t interval : {1, 2, 3, 2000}) {
    std::set<int64_t> overflow = {3, 4, 17, 18, 19, 40};
    GradScalerOptions o;
    o.growth_interval = interval;
    auto steps = replay_scaler(50, {overflow.begin(), overflow.end()}, o);
    auto want = expected_scales(50, overflow, 65536.0, interval);
    ASSERT_EQ(steps.size(), 50u);
    for (size_t i = 0; i < steps.size(); ++i) {
      EXPECT_EQ(steps[i].scale, want[i]) << "step " << i + 1 << " interval " << interval;
      EXPECT_EQ(steps[i].skipped, overflow.count(static_cast<int64_t>(i) + 1) == 1) << i + 1;
    }
  }
}

TEST(GradScalerRules, ScaleNeverGrowsToInfinityAndCanFallBelowOne) {
  GradScalerOptions o;
  o.init_scale = std::ldexp(1.0, 127);
  o.growth_interval = 1;
  auto up = replay_scaler(3, {}, o);
  EXPECT_EQ(up.back().next_scale, std::ldexp(1.0, 127));
  o.init_scale = 1.0;
  auto down = replay_scaler(3, {1, 2, 3}, o);
  EXPECT_EQ(down.back().next_scale, 0.125);
}

TEST(GradScalerRules, ReplayRejectsStepsOutOfRange) {
  EXPECT_NE(error_of([] { replay_scaler(5, {6}, {}); }).find("outside 1..5"), std::string::npos);
  EXPECT_NE(error_of([] { replay_scaler(0, {}, {}); }).find("--steps"), std::string::npos);
}

TEST_F(ScalerFixture, InfOnOneDeviceSkipsTheStepAndNeverReachesTheWeights) {
  SGD opt({{"a", &w0, &g0}, {"b", &w1, &g1}}, 0.5f);
  GradScaler scaler;
  const float s = scaler.loss_scale();
  set_grad(g0, 0, {s, 2 * s, 3 * s});
  set_grad(g1, 1, {s, INFINITY, s});
  EXPECT_FALSE(scaler.step(ctx, opt));
  EXPECT_TRUE(scaler.last_step_skipped());
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(host(w0), std::vector<float>({0, 0, 0}));
  EXPECT_EQ(host(w1), std::vector<float>({0, 0, 0}));

  // A clean step: the gradients are unscaled before the optimizer sees them.
  const float s2 = scaler.loss_scale();
  set_grad(g0, 0, {s2, 2 * s2, 3 * s2});
  set_grad(g1, 1, {s2, s2, s2});
  EXPECT_TRUE(scaler.step(ctx, opt));
  scaler.update();
  EXPECT_EQ(host(w0), std::vector<float>({-0.5f, -1.0f, -1.5f}));
}

TEST_F(ScalerFixture, StageErrorsInPyTorchsWords) {
  SGD opt({{"a", &w0, &g0}}, 0.1f);
  GradScaler scaler;
  set_grad(g0, 0, {1, 1, 1});
  scaler.unscale_(ctx, opt);
  EXPECT_EQ(error_of([&] { scaler.unscale_(ctx, opt); }),
            "unscale_() has already been called on this optimizer since the last update().");
  scaler.step(ctx, opt);
  EXPECT_EQ(error_of([&] { scaler.unscale_(ctx, opt); }), "unscale_() is being called after step().");
  EXPECT_EQ(error_of([&] { scaler.step(ctx, opt); }), "step() has already been called since the last update().");
  scaler.update();
  EXPECT_EQ(error_of([&] { scaler.update(); }), "No inf checks were recorded prior to update.");
  g0 = Tensor();  // no gradient at all: nothing to check
  EXPECT_EQ(error_of([&] { scaler.step(ctx, opt); }), "No inf checks were recorded for this optimizer.");
}

TEST_F(ScalerFixture, DisabledScalerIsATransparentWrapper) {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(o);
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(scaler.loss_scale(), 1.0f);
  EXPECT_TRUE(scaler.state_dict().empty());
  SGD opt({{"a", &w0, &g0}}, 1.0f);
  set_grad(g0, 0, {1, 2, 3});
  EXPECT_TRUE(scaler.step(ctx, opt));
  EXPECT_EQ(host(w0), std::vector<float>({-1, -2, -3}));
  EXPECT_EQ(error_of([&] { scaler.load_state_dict({}); }),
            "The source state dict is empty, possibly because it was saved from a disabled instance "
            "of GradScaler.");
}

TEST(GradScalerRules, StateDictKeysAndRoundTrip) {
  GradScalerOptions o;
  o.growth_interval = 2;
  o.growth_factor = 4;
  o.backoff_factor = 0.25;
  GradScaler a(o);
  auto sd = a.state_dict();
  std::set<std::string> keys;
  for (auto& [k, v] : sd) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}));
  EXPECT_EQ(sd["scale"], 65536.0);
  EXPECT_EQ(sd["growth_factor"], 4.0);
  EXPECT_EQ(sd["backoff_factor"], 0.25);
  EXPECT_EQ(sd["growth_interval"], 2.0);
  EXPECT_EQ(sd["_growth_tracker"], 0.0);
  sd["scale"] = 1024;
  sd["_growth_tracker"] = 1;
  GradScaler b;  // the defaults (2, 0.5, 2000): every field must come from the state dict
  b.load_state_dict(sd);
  EXPECT_EQ(b.get_scale(), 1024.0);
  EXPECT_EQ(b.growth_tracker(), 1);
  EXPECT_EQ(b.state_dict(), sd);
}

TEST(UnscaleKernel, SimMatchesRef) {
  std::vector<float> g = {1, -2, 3.5f, 65504, 1e-8f, 0};
  for (float bad : {0.0f, INFINITY, -INFINITY, NAN}) {
    for (float inv : {1.0f, 0.25f, 1.0f / 65536}) {
      auto a = g, b = g;
      if (bad != 0.0f) a[2] = b[2] = bad;
      float fa = 0, fb = 0;
      ref::non_finite_check_and_unscale(a.data(), 6, inv, &fa);
      cpu::non_finite_check_and_unscale(b.data(), 6, inv, &fb);
      EXPECT_EQ(fa, bad != 0.0f ? 1.0f : 0.0f);
      EXPECT_EQ(fa, fb);
      for (size_t i = 0; i < 6; ++i)
        if (std::isfinite(a[i])) EXPECT_EQ(a[i], b[i]);
    }
  }
}

}  // namespace
}  // namespace furnace
