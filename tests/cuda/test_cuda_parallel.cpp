// DataParallel on real GPUs (SKIPPED with fewer than two): five SGD steps through DataParallel
// leave the same weights as one device with the whole batch, with NCCL's broadcast and reduce and
// with peer copies (FURNACE_NCCL=0); peer copies and reduce_add are exact; the DP Scenario trains to
// the simulator's accuracy.
//
// Bound (as tests/parallel/test_parallel.cpp argues for the simulator): a gradient element is a sum
// over the batch, split into per-replica GEMMs whose partial sums NCCL or the peer-copy path then
// adds; the reassociation moves the weights after 5 momentum steps by a few 1e-7. cuBLAS may also
// pick a different kernel (and summation order) for each chunk size: |w_dp - w_1| <= 1e-5 +
// 1e-4 |w_1|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "cuda/cuda_test_support.h"
#include "furnace/nn.h"
#include "furnace/parallel.h"
#include "furnace/random.h"
#include "furnace/train.h"
#include "parallel/comm.h"

namespace furnace {
namespace {

using cuda_test::download;
using cuda_test::upload;

// FURNACE_NCCL is read when the cuda backend is made: set it for one machine's lifetime.
class NcclSetting {
 public:
  explicit NcclSetting(bool use) { ::setenv("FURNACE_NCCL", use ? "1" : "0", 1); }
  ~NcclSetting() { ::unsetenv("FURNACE_NCCL"); }
};

std::vector<float> random_vec(size_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(n);
  for (float& x : v) x = g.uniform(-1.0f, 1.0f);
  return v;
}

std::vector<std::vector<float>> train_five_steps(int k, int64_t B, bool nccl) {
  NcclSetting setting(nccl);
  cuda_test::CudaMachine m;
  Runtime& rt = m.rt;
  OpContext ctx{rt, 0, 0};
  MLP model(rt, 0, {784, 64, 64, 10});
  model.init_parameters(ctx, 7);
  SGD opt(model.parameters(), 0.1f, 0.9f);
  CrossEntropyLoss ce;
  std::unique_ptr<DataParallel> dp;
  std::vector<int> ids;
  for (int d = 0; d < k; ++d) ids.push_back(d);
  if (k > 1) dp = std::make_unique<DataParallel>(rt, model, ids);
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> xs = random_vec(static_cast<size_t>(B * 784), 100 + static_cast<uint64_t>(step));
    Tensor x = Tensor::empty_host({B, 784});
    std::copy(xs.begin(), xs.end(), x.data<float>());
    std::vector<int32_t> labels(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + step) % 10);
    Tensor y = Tensor::empty(rt, Device::cuda(0), {B}, DType::i32);
    ops::copy_to_device(ctx, y, labels.data());
    Tensor logits;
    if (dp) {
      logits = dp->forward(ctx, x);
    } else {
      Tensor xd = Tensor::empty(rt, Device::cuda(0), x.shape());
      ops::copy_(ctx, xd, x);
      logits = model.forward(ctx, xd);
    }
    ce.forward(ctx, logits, y);
    opt.zero_grad(ctx);
    Tensor dlogits = ce.backward(ctx);
    if (dp) dp->backward(ctx, dlogits);
    else model.backward(ctx, dlogits);
    opt.step(ctx);
  }
  std::vector<std::vector<float>> out;
  for (Parameter& p : model.parameters()) out.push_back(model.parameter_values(ctx, p.name));
  return out;
}

class CudaDataParallel : public ::testing::Test {
 protected:
  void SetUp() override { FURNACE_REQUIRE_CUDA_DEVICES(2); }
  int devices() const { return std::min(cuda::device_count(), 4); }
};

void expect_same_weights(const std::vector<std::vector<float>>& dp, const std::vector<std::vector<float>>& one,
                         const char* what) {
  float worst = 0;
  for (size_t p = 0; p < one.size(); ++p)
    for (size_t i = 0; i < one[p].size(); ++i) {
      const float diff = std::fabs(dp[p][i] - one[p][i]);
      worst = std::max(worst, diff);
      ASSERT_LE(diff, 1e-5f + 1e-4f * std::fabs(one[p][i])) << what << " param " << p << "[" << i << "]";
    }
  std::printf("[ cuda DP ] %s: max |w_dp - w_1| after 5 steps = %.3g\n", what, worst);
}

TEST_F(CudaDataParallel, WeightsEqualOneDeviceWithNccl) {
  const auto one = train_five_steps(1, 96, true);
  expect_same_weights(train_five_steps(devices(), 96, true), one, "nccl");
}

TEST_F(CudaDataParallel, WeightsEqualOneDeviceWithPeerCopies) {
  const auto one = train_five_steps(1, 96, false);
  expect_same_weights(train_five_steps(devices(), 96, false), one, "peer copies");
  expect_same_weights(train_five_steps(devices(), 10, false), train_five_steps(1, 10, false), "uneven chunks");
}

TEST_F(CudaDataParallel, PeerCopiesAndReduceAddAreExact) {
  for (bool nccl : {true, false}) {
    NcclSetting setting(nccl);
    cuda_test::CudaMachine m;
    OpContext ctx{m.rt, 0, 0};
    const std::vector<float> a = random_vec(100003, 1), b = random_vec(100003, 2);
    Tensor ta = upload(m.rt, 0, a, {100003}), tb = upload(m.rt, 1, b, {100003});
    Tensor moved = Tensor::empty(m.rt, Device::cuda(1), {100003});
    ops::copy_(ctx, moved, ta);
    EXPECT_EQ(download(m.rt, moved), a);
    const std::vector<float> sum = download(m.rt, parallel::reduce_add(ctx, {ta, tb}, 0));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(sum[i], a[i] + b[i]) << i;  // two terms: one rounding
    const auto copies = parallel::broadcast_coalesced(ctx, {ta}, {0, 1});
    EXPECT_EQ(download(m.rt, copies[1][0]), a);
  }
}

TEST_F(CudaDataParallel, ScenarioTrainsToTheSimulatorsAccuracy) {
  Scenario cuda;
  cuda.backend = "cuda";
  cuda.data_dir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  cuda.epochs = 4;
  cuda.batch = 128;
  cuda.parallel = "dp";
  Scenario sim = cuda;
  sim.backend = "sim";
  sim.topology = "workstation-4x3090";
  std::vector<int> ids;
  for (int d = 0; d < devices(); ++d) ids.push_back(d);
  cuda.device_ids = sim.device_ids = ids;
  TraceBus b1, b2;
  const TrainResult c = train(cuda, b1), s = train(sim, b2);
  ASSERT_TRUE(c.dp.has_value());
  EXPECT_EQ(c.dp->device_ids, ids);
  EXPECT_NEAR(c.test_accuracy, s.test_accuracy, 0.02);
  EXPECT_GT(c.test_accuracy, 0.6);
}

}  // namespace
}  // namespace furnace
