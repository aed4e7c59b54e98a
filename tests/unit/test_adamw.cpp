// ops::adamw_step (torch.optim.AdamW, single-tensor path): the simulator's loop equals the
// reference bit for bit, the update is AdamW's formula (checked against an independent double
// precision evaluation), weight decay is decoupled, and bad hyperparameters get PyTorch's message.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "furnace/error.h"
#include "furnace/ops.h"
#include "furnace/random.h"
#include "furnace/topology.h"
#include "ops/ref/ref_ops.h"
#include "backend/cpu/cpu_kernels.h"

namespace furnace {
namespace {

std::vector<float> random_vec(size_t n, uint64_t seed, float lo, float hi) {
  Generator g(seed);
  std::vector<float> v(n);
  for (float& x : v) x = g.uniform(lo, hi);
  return v;
}

TEST(AdamW, SimEqualsRefBitForBitOverSteps) {
  const size_t n = 1037;
  auto p_ref = random_vec(n, 1, -1, 1), p_sim = p_ref;
  std::vector<float> m_ref(n, 0), v_ref(n, 0), m_sim(n, 0), v_sim(n, 0);
  for (int64_t step = 1; step <= 4; ++step) {
    const auto g = random_vec(n, 10 + static_cast<uint64_t>(step), -2, 2);
    ref::adamw_step(p_ref.data(), g.data(), m_ref.data(), v_ref.data(), static_cast<int64_t>(n), 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
    cpu::adamw_step(p_sim.data(), g.data(), m_sim.data(), v_sim.data(), static_cast<int64_t>(n), 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, step);
  }
  EXPECT_EQ(p_ref, p_sim);
  EXPECT_EQ(m_ref, m_sim);
  EXPECT_EQ(v_ref, v_sim);
}

TEST(AdamW, FollowsTheFormulaEvaluatedInDouble) {
  // beta1 0.9 takes lerp's first form (weight 1 - beta1 < 0.5), beta1 0.3 its second.
  for (const double b1 : {0.9, 0.3}) {
    SCOPED_TRACE(b1);
    const size_t n = 257;
    const double lr = 2e-3, b2 = 0.99, eps = 1e-6, wd = 0.05;
    auto p = random_vec(n, 2, -1, 1);
    std::vector<double> pd(p.begin(), p.end()), md(n, 0), vd(n, 0);
    std::vector<float> m(n, 0), v(n, 0);
    for (int64_t step = 1; step <= 3; ++step) {
      const auto g = random_vec(n, 20 + static_cast<uint64_t>(step), -1, 1);
      ref::adamw_step(p.data(), g.data(), m.data(), v.data(), static_cast<int64_t>(n), static_cast<float>(lr),
                      static_cast<float>(b1), static_cast<float>(b2), static_cast<float>(eps),
                      static_cast<float>(wd), step);
      const double bc1 = 1 - std::pow(b1, static_cast<double>(step));
      const double bc2 = 1 - std::pow(b2, static_cast<double>(step));
      for (size_t i = 0; i < n; ++i) {
        pd[i] *= 1 - lr * wd;
        md[i] = b1 * md[i] + (1 - b1) * g[i];
        vd[i] = b2 * vd[i] + (1 - b2) * g[i] * g[i];
        pd[i] -= lr / bc1 * md[i] / (std::sqrt(vd[i]) / std::sqrt(bc2) + eps);
      }
    }
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(p[i], pd[i], 2e-6) << i;
  }
}

TEST(AdamW, WithAZeroGradientOnlyTheDecoupledWeightDecayActs) {
  std::vector<float> p{1.0f, -2.0f, 0.5f}, g(3, 0.0f), m(3, 0.0f), v(3, 0.0f);
  ref::adamw_step(p.data(), g.data(), m.data(), v.data(), 3, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, 1);
  const float decay = static_cast<float>(1.0 - 0.1 * 0.5);  // computed as PyTorch does, in double
  EXPECT_EQ(p, (std::vector<float>{1.0f * decay, -2.0f * decay, 0.5f * decay}));
}

TEST(AdamW, TheFirstStepMovesEachWeightByAboutTheLearningRate) {
  // m = (1-b1) g, v = (1-b2) g^2, bias-corrected: m^ / sqrt(v^) = sign(g), so |dp| ~= lr.
  std::vector<float> p{0.0f, 0.0f}, g{3.0f, -1e-3f}, m(2, 0.0f), v(2, 0.0f);
  ref::adamw_step(p.data(), g.data(), m.data(), v.data(), 2, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 1);
  EXPECT_NEAR(p[0], -0.01f, 1e-6f);
  EXPECT_NEAR(p[1], 0.01f, 1e-6f);
}

TEST(AdamW, BadHyperparametersGetPyTorchsMessages) {
  TraceBus bus;
  Runtime rt(make_sim_backend(load_topology("laptop-4060"), &bus), bus);
  OpContext ctx{rt, 0, 0};
  Tensor p = Tensor::empty(rt, Device::cuda(0), {4}), g = Tensor::empty(rt, Device::cuda(0), {4});
  Tensor m = Tensor::empty(rt, Device::cuda(0), {4}), v = Tensor::empty(rt, Device::cuda(0), {4});
  auto message = [&](float lr, float b1, float b2, float eps, float wd, int64_t step) {
    try {
      ops::adamw_step(ctx, p, g, m, v, lr, b1, b2, eps, wd, step);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(-1, 0.9f, 0.999f, 1e-8f, 0, 1), "Invalid learning rate: -1");
  EXPECT_EQ(message(1e-3f, 1.0f, 0.999f, 1e-8f, 0, 1), "Invalid beta parameter at index 0: 1");
  EXPECT_EQ(message(1e-3f, 0.9f, -0.5f, 1e-8f, 0, 1), "Invalid beta parameter at index 1: -0.5");
  EXPECT_EQ(message(1e-3f, 0.9f, 0.999f, -1, 0, 1), "Invalid epsilon value: -1");
  EXPECT_EQ(message(1e-3f, 0.9f, 0.999f, 1e-8f, -0.5f, 1), "Invalid weight_decay value: -0.5");
  EXPECT_EQ(message(1e-3f, 0.9f, 0.999f, 1e-8f, 0, 0), "adamw_step: step must be at least 1 (got 0)");
  Tensor wrong = Tensor::empty(rt, Device::cuda(0), {5});
  EXPECT_THROW(ops::adamw_step(ctx, p, wrong, m, v, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1), Error);
}

}  // namespace
}  // namespace furnace
