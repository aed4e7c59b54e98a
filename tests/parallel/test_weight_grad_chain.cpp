// parallel/weight_grad_chain: the simulator's running sums of DataParallel's weight gradients give
// the bits of every replica writing its own gradient and reduce_add summing them, or are not used.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <memory>
#include <ostream>
#include <vector>

#include "furnace/nn.h"
#include "furnace/op_table.h"  // defines: CpuGemmThreadsScope
#include "furnace/parallel.h"
#include "furnace/topology.h"
#include "parallel/gemm_exactness.h"
#include "parallel/weight_grad_chain.h"
#include "support/test_support.h"  // defines: random_vec

namespace furnace {
namespace {

using test_support::download;
using test_support::host_tensor;
using test_support::random_vec;

struct Case {
  std::vector<int> sizes;
  int replicas;
  int64_t batch;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.replicas << " replicas, batch " << c.batch << ", sizes";
  for (int s : c.sizes) *os << " " << s;
}

// What one DataParallel step leaves: the module's gradients (each parameter's host values), and
// what the simulator modelled: every device's clock and its allocator's current and peak bytes.
struct Step {
  std::vector<std::vector<float>> grads;
  std::vector<double> clocks;
  std::vector<size_t> allocated, peak;
  std::vector<int64_t> rows;  // per replica
  bool chained = false;
};

// The step taken apart: scatter, replicate, the replicas' forward, each replica's backward from a
// fixed output gradient, replicate_backward; `chain` hands the weight GEMMs to a WeightGradChain
// (if it arms), its workers adding to the sums as DataParallel's do.
Step module_grads(const Case& c, bool chain) {
  TraceBus bus;
  Runtime rt(make_sim_backend(load_topology("dgx-h100"), &bus), bus);
  OpContext ctx{rt, 0, 0};
  MLP model(rt, 0, c.sizes);
  model.init_parameters(ctx, 5);
  std::vector<int> devices;
  for (int i = 0; i < c.replicas; ++i) devices.push_back(i);
  const int64_t in = c.sizes.front(), out = c.sizes.back();
  // ReLU-like inputs: exact zeros among the rows, as the hidden layers see.
  const Tensor x =
      host_tensor(random_vec(static_cast<size_t>(c.batch * in), 17, -1.0f, 3.0f), {c.batch, in});
  std::vector<Tensor> inputs = parallel::scatter(ctx, x, devices);
  devices.resize(inputs.size());
  auto replicas = parallel::replicate(ctx, model, devices);
  parallel::parallel_apply(rt, replicas, inputs, devices, DType::f32);
  Step step;
  for (const Tensor& t : inputs) step.rows.push_back(t.size(0));
  parallel::WeightGradChain weight_grads;
  if (chain) {
    CpuGemmThreadsScope one_blas_thread(1);
    step.chained = weight_grads.arm(c.sizes, step.rows);
  }
  const bool chained = step.chained;
  std::vector<std::vector<parallel::FlatBucket>> coalesced(replicas.size());
  parallel::parallel_apply(devices, [&](size_t i) {
    OpContext dev{rt, devices[i], 0};
    const int64_t rows = step.rows[i];
    const Tensor g = host_tensor(random_vec(static_cast<size_t>(rows * out), 40 + i, -0.1f, 0.1f), {rows, out});
    Tensor gd = Tensor::empty(rt, Device::cuda(devices[i]), g.shape());
    ops::copy_(dev, gd, g);
    if (chained) replicas[i]->set_weight_grad_sink(&weight_grads.sink(i));
    replicas[i]->backward(dev, gd);
    coalesced[i] = parallel::coalesce_replica_grads(dev, *replicas[i], /*weights_written=*/!chained);
    if (chained) weight_grads.help();  // as DataParallel's workers: what is there, in order
  }, 2);
  std::function<void(size_t, Tensor&)> presummed;
  if (chained) {
    weight_grads.sum(2);
    presummed = [&](size_t layer, Tensor& t) { weight_grads.write_sum(layer, t); };
  }
  parallel::replicate_backward(ctx, model, replicas, &coalesced, presummed);
  for (Parameter& p : model.parameters()) {
    Tensor h = Tensor::empty_host(p.grad->shape());
    ops::copy_(ctx, h, *p.grad);
    step.grads.emplace_back(h.data<float>(), h.data<float>() + h.numel());
  }
  replicas.clear();
  for (int d = 0; d < c.replicas; ++d) {
    step.clocks.push_back(rt.backend().stream_time(d, 0));
    step.allocated.push_back(rt.memory_allocated(d));
    step.peak.push_back(rt.max_memory_allocated(d));
  }
  return step;
}

class WeightGradChainBits : public ::testing::TestWithParam<Case> {};

TEST_P(WeightGradChainBits, TheModulesGradientsAreTheEagerPathsBitForBit) {
  const Case& c = GetParam();
  const Step eager = module_grads(c, false);
  const Step chained = module_grads(c, true);
  if (!chained.chained) GTEST_SKIP() << "this OpenBLAS splits these rows: the chain is not used";
  ASSERT_EQ(eager.rows, chained.rows);
  ASSERT_EQ(eager.grads.size(), chained.grads.size());
  for (size_t p = 0; p < eager.grads.size(); ++p) {
    ASSERT_EQ(eager.grads[p].size(), chained.grads[p].size());
    EXPECT_EQ(std::memcmp(eager.grads[p].data(), chained.grads[p].data(),
                          eager.grads[p].size() * sizeof(float)), 0)
        << "parameter " << p << " differs in its bits";
  }
  // The modelled machine did not notice: the same clocks, the same memory, to the byte.
  EXPECT_EQ(eager.clocks, chained.clocks);
  EXPECT_EQ(eager.allocated, chained.allocated);
  EXPECT_EQ(eager.peak, chained.peak);
  // Not vacuous: the gradients are not zero, and more than one replica contributed.
  float largest = 0;
  for (float v : chained.grads[0]) largest = std::max(largest, std::fabs(v));
  EXPECT_GT(largest, 0.0f);
  EXPECT_GE(chained.rows.size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WeightGradChainBits,
    ::testing::Values(Case{{784, 512, 512, 10}, 8, 256},   // the reference MLP, 32 rows each
                      Case{{784, 512, 512, 10}, 4, 256},   // 64 rows each
                      Case{{784, 512, 512, 10}, 3, 100},   // unequal chunks: 34, 34, 32
                      Case{{37, 20, 9}, 4, 10},            // 3, 3, 3, 1
                      Case{{16, 8, 4}, 8, 5}));            // five replicas of one row

TEST(WeightGradChain, RefusesWhereOpenBlasSplitsTheRowsIntoSeveralPasses) {
  CpuGemmThreadsScope one_blas_thread(1);
  if (!parallel::chain_is_exact(512, 784, 32))
    GTEST_SKIP() << "this OpenBLAS splits even 32 rows: the chain is never used here";
  // 4096 rows are more than any OpenBLAS kernel's K block: partial sums added to the running sum
  // one block at a time round differently from a whole product added once.
  EXPECT_FALSE(parallel::chain_is_exact(64, 64, 4096));
  parallel::WeightGradChain chain;
  EXPECT_FALSE(chain.arm({64, 64, 10}, {32, 4096}));
  EXPECT_TRUE(chain.arm({64, 64, 10}, {32, 32}));
}

TEST(WeightGradChain, AnOperandOfTheWrongShapeIsOneClearError) {
  TraceBus bus;
  Runtime rt(make_sim_backend(load_topology("dgx-h100"), &bus), bus);
  CpuGemmThreadsScope one_blas_thread(1);
  parallel::WeightGradChain chain;
  ASSERT_TRUE(chain.arm({8, 4}, {2, 2}));
  const Tensor dout = host_tensor(std::vector<float>(6, 1.0f), {2, 3});
  const Tensor input = host_tensor(std::vector<float>(16, 1.0f), {2, 8});
  try {
    chain.sink(0).take(0, dout, input);
    FAIL() << "a (2, 3) grad_output for a layer of 4 outputs was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("armed for (2, 4) and (2, 8)"), std::string::npos) << e.what();
  }
  // A layer not handed over by every replica is not summed.
  const Tensor good = host_tensor(std::vector<float>(8, 1.0f), {2, 4});
  chain.sink(0).take(0, good, input);
  EXPECT_THROW(chain.sum(1), Error);
}

// A batch of one row over several devices is one chunk, so one replica: its gradients are the
// reduce's result as they are, written by its own backward (no chain), and equal to the module
// run directly on device_ids[0].
TEST(DataParallelOneChunk, ItsGradientsAreTheModulesOwnBitForBit) {
  auto grads = [](bool data_parallel) {
    TraceBus bus;
    Runtime rt(make_sim_backend(load_topology("dgx-h100"), &bus), bus);
    OpContext ctx{rt, 0, 0};
    MLP model(rt, 0, {12, 8, 3});
    model.init_parameters(ctx, 9);
    const Tensor x = host_tensor(random_vec(12, 3), {1, 12});
    const Tensor g = host_tensor(random_vec(3, 4), {1, 3});
    Tensor gd = Tensor::empty(rt, Device::cuda(0), {1, 3});
    ops::copy_(ctx, gd, g);
    if (data_parallel) {
      DataParallel dp(rt, model, std::vector<int>{0, 1, 2});
      dp.forward(ctx, x);
      EXPECT_EQ(dp.last_chunks(), std::vector<int64_t>{1});
      dp.backward(ctx, gd);
    } else {
      Tensor xd = Tensor::empty(rt, Device::cuda(0), {1, 12});
      ops::copy_(ctx, xd, x);
      model.forward(ctx, xd);
      model.backward(ctx, gd);
    }
    std::vector<std::vector<float>> out;
    for (Parameter& p : model.parameters()) out.push_back(download(rt, *p.grad));
    return out;
  };
  const auto direct = grads(false);
  const auto dp = grads(true);
  ASSERT_EQ(direct.size(), dp.size());
  for (size_t p = 0; p < direct.size(); ++p) {
    ASSERT_EQ(direct[p].size(), dp[p].size());
    EXPECT_EQ(std::memcmp(direct[p].data(), dp[p].data(), direct[p].size() * sizeof(float)), 0)
        << "parameter " << p;
  }
}

}  // namespace
}  // namespace furnace
