// Mixed precision and accumulation through the model and the trainer: accumulation equals one big
// batch (one device and DataParallel), the undivided loss is accum times the gradient, fp16 without
// a scaler flushes small gradients to zero and with one does not, and in training an overflow
// skips exactly the steps the scale rule says while the weights stay finite.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "furnace/amp.h"
#include "furnace/parallel.h"
#include "furnace/random.h"
#include "furnace/topology.h"
#include "furnace/train.h"
#include "support/test_support.h"  // defines: random_vec

namespace furnace {
namespace {

using test_support::host_tensor;
using test_support::random_vec;

struct Sim {
  explicit Sim(const char* topology) : rt(make_sim_backend(load_topology(topology), &bus), bus) {}
  TraceBus bus;
  Runtime rt;
};

// 3 optimizer steps of SGD(momentum 0.9) on batches of B rows, each step made of `accum`
// micro-batches of B / accum rows with loss * dloss_factor / accum ... on `k` devices (k > 1: DP).
std::vector<std::vector<float>> train_steps(int k, int64_t B, int accum, bool divide, int steps = 3) {
  Sim m("dgx-h100");
  OpContext ctx{m.rt, 0, 0};
  MLP model(m.rt, 0, {784, 64, 64, 10});
  model.init_parameters(ctx, 5);
  SGD opt(model.parameters(), 0.1f, 0.9f);
  CrossEntropyLoss ce;
  std::unique_ptr<DataParallel> dp;
  if (k > 1) {
    std::vector<int> ids;
    for (int i = 0; i < k; ++i) ids.push_back(i);
    dp = std::make_unique<DataParallel>(m.rt, model, ids);
  }
  const int64_t micro = B / accum;
  for (int step = 0; step < steps; ++step) {
    auto xs = random_vec(static_cast<size_t>(B * 784), 40 + step, 0.0f, 1.0f);
    opt.zero_grad(ctx);
    for (int a = 0; a < accum; ++a) {
      std::vector<float> part(xs.begin() + a * micro * 784, xs.begin() + (a + 1) * micro * 784);
      std::vector<int32_t> labels(static_cast<size_t>(micro));
      for (int64_t i = 0; i < micro; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((a * micro + i) * 3 % 10);
      Tensor x = host_tensor(part, {micro, 784});
      Tensor y = Tensor::empty(m.rt, Device::cuda(0), {micro}, DType::i32);
      ops::copy_to_device(ctx, y, labels.data());
      Tensor logits;
      if (dp) {
        logits = dp->forward(ctx, x);
      } else {
        Tensor xd = Tensor::empty(m.rt, Device::cuda(0), x.shape());
        ops::copy_(ctx, xd, x);
        logits = model.forward(ctx, xd);
      }
      ce.forward(ctx, logits, y);
      Tensor dlogits = ce.backward(ctx, divide ? 1.0f / static_cast<float>(accum) : 1.0f);
      if (dp) dp->backward(ctx, dlogits);
      else model.backward(ctx, dlogits);
    }
    opt.step(ctx);
  }
  std::vector<std::vector<float>> out;
  for (Parameter& p : model.parameters()) out.push_back(model.parameter_values(ctx, p.name));
  return out;
}

// Same fp32 reassociation bound as DataParallel's equivalence test: sums over the batch are split
// into partial sums in another order.
void expect_close(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                  const char* what) {
  for (size_t p = 0; p < a.size(); ++p)
    for (size_t i = 0; i < a[p].size(); ++i)
      ASSERT_LE(std::fabs(a[p][i] - b[p][i]), 1e-6f + 1e-5f * std::fabs(b[p][i])) << what << " param " << p << "[" << i << "]";
}

TEST(Accumulation, MicroBatchesWithLossOverMEqualOneBigBatch) {
  const auto big = train_steps(1, 64, 1, true);
  expect_close(train_steps(1, 64, 4, true), big, "accum 4, one device");
  expect_close(train_steps(1, 64, 2, true), big, "accum 2, one device");
}

TEST(Accumulation, WithDataParallelEachMicroStepIsAFullDpStep) {
  const auto big = train_steps(1, 64, 1, true);
  expect_close(train_steps(4, 64, 4, true), big, "accum 4, DP on 4");
  expect_close(train_steps(3, 64, 2, true), big, "accum 2, DP on 3");
}

// The first SGD step's update is -lr x grad (momentum's buffer starts as the gradient), and the
// gradient without `loss / accum` is accum times the divided one (a power of two: exact), so the
// weights move exactly 4 times as far, up to the rounding of w - update.
TEST(Accumulation, WithoutTheDivisionTheUpdateIsMTimesLarger) {
  const auto start = train_steps(1, 64, 4, true, 0);
  const auto divided = train_steps(1, 64, 4, true, 1);
  const auto undivided = train_steps(1, 64, 4, false, 1);
  ASSERT_EQ(start.size(), divided.size());
  ASSERT_EQ(start.size(), undivided.size());
  double moved = 0;
  for (size_t p = 0; p < start.size(); ++p)
    for (size_t i = 0; i < start[p].size(); ++i) {
      const double d = static_cast<double>(divided[p][i]) - start[p][i];
      const double u = static_cast<double>(undivided[p][i]) - start[p][i];
      // Each side's new weight is rounded once (half an ulp, four times that on the divided side):
      // 4 ulps of the largest of the three weights cover it.
      const float largest = std::max({std::fabs(start[p][i]), std::fabs(divided[p][i]), std::fabs(undivided[p][i]), 1e-30f});
      const double ulp = std::ldexp(1.0, std::ilogb(largest) - 23);
      ASSERT_NEAR(u, 4 * d, 4 * ulp + 1e-12) << "param " << p << "[" << i << "]";
      moved += std::fabs(d);
    }
  EXPECT_GT(moved, 1e-3) << "one step must move the weights";
}

// The gradients of the first layer in fp32, and in fp16 autocast with loss * dloss then unscaled.
std::vector<float> first_layer_grad(DType autocast, float dloss) {
  Sim m("laptop-4060");
  OpContext ctx{m.rt, 0, 0};
  MLP model(m.rt, 0, {784, 512, 512, 10});
  model.init_parameters(ctx, 3);
  const int64_t B = 256;
  auto xs = random_vec(static_cast<size_t>(B * 784), 9, 0.0f, 1.0f);
  std::vector<int32_t> labels(B);
  for (int64_t i = 0; i < B; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  Tensor x = Tensor::empty(m.rt, Device::cuda(0), {B, 784});
  Tensor y = Tensor::empty(m.rt, Device::cuda(0), {B}, DType::i32);
  ops::copy_to_device(ctx, x, xs.data());
  ops::copy_to_device(ctx, y, labels.data());
  OpContext amp{m.rt, 0, 0, autocast};
  Tensor logits = model.forward(amp, x);
  CrossEntropyLoss ce;
  ce.forward(ctx, logits, y);
  model.backward(ctx, ce.backward(ctx, dloss));
  std::vector<float> g = model.parameter_values(ctx, "0.weight");
  std::vector<float> grad(g.size());
  ops::copy_to_host(ctx, grad.data(), *model.parameters()[0].grad);
  for (float& v : grad) v /= dloss;  // unscale
  return grad;
}

TEST(Fp16, WithoutAScalerSmallGradientsFlushToZeroWithOneTheySurvive) {
  const auto ref = first_layer_grad(DType::f32, 1.0f);
  const auto plain = first_layer_grad(DType::f16, 1.0f);
  const auto scaled = first_layer_grad(DType::f16, 65536.0f);
  int64_t nonzero = 0, lost_plain = 0, lost_scaled = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref[i] == 0.0f) continue;
    ++nonzero;
    lost_plain += plain[i] == 0.0f;
    lost_scaled += scaled[i] == 0.0f;
  }
  std::printf("[ fp16 underflow ] %lld non-zero fp32 gradients; flushed to zero: %lld without a scaler, %lld with scale 65536\n",
              static_cast<long long>(nonzero), static_cast<long long>(lost_plain), static_cast<long long>(lost_scaled));
  // At initialisation only the smallest first-layer gradients fall below fp16's 2^-24; late in
  // training, with smaller losses, many more do. The property: fp16 alone loses some, the scaler
  // (almost) none.
  EXPECT_GE(lost_plain, 20);
  EXPECT_LE(lost_scaled * 10, lost_plain);
}

TEST(Fp16Training, OverflowSkipsExactlyTheStepsTheScaleRuleSaysAndWeightsStayFinite) {
  Scenario sc;
  sc.data_dir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  sc.epochs = 6;
  sc.amp = "fp16";
  sc.scaler.init_scale = std::ldexp(1.0, 32);  // far too large: the first steps overflow
  sc.scaler.growth_interval = 5;
  struct Seen {
    double scale;
    int64_t skipped;
  };
  std::vector<Seen> seen;
  TraceBus bus;
  TrainResult r = train(sc, bus, [&](const Progress& p) { seen.push_back({p.loss_scale, p.skipped_steps}); });
  ASSERT_EQ(static_cast<int64_t>(seen.size()), r.steps);
  // Replay the rule on the observed skips: halve on a skipped step, double after 5 clean ones.
  double scale = sc.scaler.init_scale;
  int64_t tracker = 0, prev_skipped = 0;
  for (size_t i = 0; i < seen.size(); ++i) {
    const bool skipped = seen[i].skipped > prev_skipped;
    prev_skipped = seen[i].skipped;
    if (skipped) {
      scale *= 0.5;
      tracker = 0;
    } else if (++tracker == 5) {
      scale *= 2;
      tracker = 0;
    }
    ASSERT_EQ(seen[i].scale, scale) << "step " << i + 1;
  }
  std::printf("[ fp16 training ] %lld of %lld steps skipped, final scale %g\n",
              static_cast<long long>(r.skipped_steps), static_cast<long long>(r.steps), r.final_loss_scale);
  EXPECT_GE(r.skipped_steps, 5);  // 2^32 must come down by several halvings first
  EXPECT_TRUE(std::isfinite(r.final_loss));
  EXPECT_GT(r.test_accuracy, 0.6);  // no inf or NaN ever reached the weights
}

}  // namespace
}  // namespace furnace
