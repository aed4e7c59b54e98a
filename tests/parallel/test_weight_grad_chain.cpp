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

// One DataParallel step's gradients on the module (each parameter's host values), taken apart:
// scatter, replicate, the replicas' forward, each replica's backward from a fixed output
// gradient, and replicate_backward; `chained` hands the weight GEMMs to a WeightGradChain.
std::vector<std::vector<float>> module_grads(const Case& c, bool chained, std::vector<int64_t>* rows) {
  TraceBus bus;
  Runtime rt(make_sim_backend(load_topology("dgx-h100"), &bus), bus);
  OpContext ctx{rt, 0, 0};
  MLP model(rt, 0, c.sizes);
  model.init_parameters(ctx, 5);
  std::vector<int> devices;
  for (int i = 0; i < c.replicas; ++i) devices.push_back(i);
  const int64_t in = c.sizes.front(), out = c.sizes.back();
  // ReLU-like inputs: exact zeros among the rows, as the hidden layers see.
  const Tensor x = host_tensor(random_vec(static_cast<size_t>(c.batch * in), 17, -1.0f, 3.0f), {c.batch, in});
  std::vector<Tensor> inputs = parallel::scatter(ctx, x, devices);
  devices.resize(inputs.size());
  auto replicas = parallel::replicate(ctx, model, devices);
  parallel::parallel_apply(rt, replicas, inputs, devices, DType::f32);
  parallel::WeightGradChain chain;
  rows->clear();
  for (const Tensor& t : inputs) rows->push_back(t.size(0));
  if (chained) {
    CpuGemmThreadsScope one_blas_thread(1);
    EXPECT_TRUE(chain.arm(c.sizes, *rows)) << "rows of at most 64 fit one OpenBLAS pass over K";
  }
  std::vector<std::vector<parallel::FlatBucket>> coalesced(replicas.size());
  parallel::parallel_apply(devices, [&](size_t i) {
    OpContext dev{rt, devices[i], 0};
    const Tensor g = host_tensor(random_vec(static_cast<size_t>(rows->at(i) * out), 40 + i, -0.1f, 0.1f),
                                 {rows->at(i), out});
    Tensor gd = Tensor::empty(rt, Device::cuda(devices[i]), g.shape());
    ops::copy_(dev, gd, g);
    if (chained) replicas[i]->set_weight_grad_sink(&chain.sink(i));
    replicas[i]->backward(dev, gd);
    coalesced[i] = parallel::coalesce_replica_grads(dev, *replicas[i], /*weights_written=*/!chained);
    if (chained) chain.help();  // as DataParallel's workers: what is there, in order
  }, 2);
  std::function<void(size_t, Tensor&)> presummed;
  if (chained) {
    chain.sum(2);
    presummed = [&](size_t layer, Tensor& t) { chain.write_sum(layer, t); };
  }
  parallel::replicate_backward(ctx, model, replicas, &coalesced, presummed);
  std::vector<std::vector<float>> grads;
  for (Parameter& p : model.parameters()) {
    Tensor h = Tensor::empty_host(p.grad->shape());
    ops::copy_(ctx, h, *p.grad);
    grads.emplace_back(h.data<float>(), h.data<float>() + h.numel());
  }
  return grads;
}

class WeightGradChainBits : public ::testing::TestWithParam<Case> {};

TEST_P(WeightGradChainBits, TheModulesGradientsAreTheEagerPathsBitForBit) {
  const Case& c = GetParam();
  std::vector<int64_t> eager_rows, chained_rows;
  const auto eager = module_grads(c, false, &eager_rows);
  const auto chained = module_grads(c, true, &chained_rows);
  ASSERT_EQ(eager_rows, chained_rows);
  ASSERT_EQ(eager.size(), chained.size());
  for (size_t p = 0; p < eager.size(); ++p) {
    ASSERT_EQ(eager[p].size(), chained[p].size());
    EXPECT_EQ(std::memcmp(eager[p].data(), chained[p].data(), eager[p].size() * sizeof(float)), 0)
        << "parameter " << p << " differs in its bits";
  }
  // Not vacuous: the replicas' gradients are not zero, and more than one replica contributed.
  float largest = 0;
  for (float v : chained[0]) largest = std::max(largest, std::fabs(v));
  EXPECT_GT(largest, 0.0f);
  EXPECT_GE(chained_rows.size(), 2u);
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
  EXPECT_TRUE(parallel::chain_is_exact(512, 784, 32));
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

}  // namespace
}  // namespace furnace
