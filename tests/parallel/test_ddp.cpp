// DistributedDataParallel (furnace/ddp.h), ranks as processes of one simulated DGX H100 on
// threads: the broadcast at construction, the mean of the ranks' gradients, DDP == one device on
// the whole batch == DataParallel for k = 2, 3, 4, 8, no_sync accumulation == one big batch, the
// buckets PyTorch builds, and the overlap of a bucket's all-reduce with the rest of backward on
// the modelled clock. This executable carries the ctest label "threads" (the tsan preset runs it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "furnace/ddp.h"
#include "furnace/error.h"
#include "furnace/op_table.h"  // defines: CpuGemmThreadsScope
#include "furnace/parallel.h"
#include "furnace/sim_machine.h"
#include "furnace/topology.h"
#include "parallel/gemm_exactness.h"  // defines: scaled_is_exact
#include "support/test_support.h"  // defines: random_vec

namespace furnace {
namespace {

using test_support::random_vec;

const std::vector<int> kSizes{784, 512, 512, 10};  // the reference MLP: two buckets once rebuilt

// The rows of the global batch of `step`: B x 784 values and labels, the same in every run.
struct GlobalBatch {
  std::vector<float> x;
  std::vector<int32_t> y;
};
GlobalBatch global_batch(int64_t rows, int step) {
  GlobalBatch b;
  b.x = random_vec(static_cast<size_t>(rows * 784), 100 + static_cast<uint64_t>(step));
  for (int64_t i = 0; i < rows; ++i) b.y.push_back(static_cast<int32_t>((i * 7 + step) % 10));
  return b;
}

// loss(x rows [first, first + n)) on `device`; returns dlogits scaled by `dloss`.
Tensor forward_loss(OpContext& ctx, const std::function<Tensor(const Tensor&)>& forward,
                    CrossEntropyLoss& ce, const GlobalBatch& g, int64_t first, int64_t n, float dloss) {
  Runtime& rt = ctx.rt;
  Tensor x = Tensor::empty(rt, Device::cuda(ctx.device), {n, 784});
  Tensor y = Tensor::empty(rt, Device::cuda(ctx.device), {n}, DType::i32);
  ops::copy_to_device(ctx, x, g.x.data() + first * 784);
  ops::copy_to_device(ctx, y, g.y.data() + first);
  Tensor logits = forward(x);
  ce.forward(ctx, logits, y);
  return ce.backward(ctx, dloss);
}

using Weights = std::vector<std::vector<float>>;

Weights weights_of(OpContext& ctx, MLP& model) {
  Weights out;
  for (Parameter& p : model.parameters()) out.push_back(model.parameter_values(ctx, p.name));
  return out;
}

// One device: `steps` SGD steps (lr 0.1, momentum 0.9) on global batches of `rows`, each split
// into `micro` micro-batches whose losses are divided by `micro` (accumulation).
// One process alone on a DGX H100 with the model on cuda:0 (seed 11) and its optimizer.
struct OneProcess {
  TraceBus bus;
  Runtime rt{make_sim_backend(load_topology("dgx-h100"), &bus), bus};
  OpContext ctx{rt, 0, 0};
  MLP model{rt, 0, kSizes};
  SGD opt{(model.init_parameters(ctx, 11), model.parameters()), 0.1f, 0.9f};
  CrossEntropyLoss ce;
};

Weights train_one_device(int steps, int64_t rows, int micro = 1) {
  OneProcess p;
  auto& [bus, rt, ctx, model, opt, ce] = p;
  for (int step = 0; step < steps; ++step) {
    const GlobalBatch g = global_batch(rows, step);
    const int64_t n = rows / micro;
    for (int m = 0; m < micro; ++m) {
      Tensor d = forward_loss(ctx, [&](const Tensor& x) { return model.forward(ctx, x); }, ce, g, m * n, n,
                              1.0f / static_cast<float>(micro));
      model.backward(ctx, d);
    }
    opt.step(ctx);
    opt.zero_grad(ctx);
  }
  return weights_of(ctx, model);
}

// DataParallel over k devices on the same global batches (one device when k = 1).
Weights train_data_parallel(int k, int steps, int64_t rows) {
  OneProcess p;
  auto& [bus, rt, ctx, model, opt, ce] = p;
  std::vector<int> ids;
  for (int i = 0; i < k; ++i) ids.push_back(i);
  DataParallel dp(rt, model, ids);
  for (int step = 0; step < steps; ++step) {
    const GlobalBatch g = global_batch(rows, step);
    Tensor x = Tensor::empty(rt, Device::cpu(), {rows, 784});
    std::copy(g.x.begin(), g.x.end(), x.data<float>());
    Tensor y = Tensor::empty(rt, Device::cuda(0), {rows}, DType::i32);
    ops::copy_to_device(ctx, y, g.y.data());
    Tensor logits = dp.forward(ctx, x);
    ce.forward(ctx, logits, y);
    dp.backward(ctx, ce.backward(ctx));
    opt.step(ctx);
    opt.zero_grad(ctx);
  }
  return weights_of(ctx, model);
}

// What every rank of a DDP run ended with.
struct DdpRun {
  std::vector<Weights> weights;              // per rank
  std::vector<std::vector<size_t>> buckets;  // rank 0's bucket bytes after the run
  std::vector<DdpCommStats> stats;           // per rank
  std::vector<std::vector<TraceEvent>> events;  // per rank, if traced
  std::vector<std::string> errors;
};

// k ranks, each a process of one DGX H100 seeing all 8 GPUs and training on cuda:rank (as
// torchrun's LOCAL_RANK picks it), rank r initialised from seed 11 + r (the broadcast must make
// them equal). Rank r takes rows [r * n, (r + 1) * n) of each global batch of k * n rows, in
// `micro` micro-batches, the first micro - 1 under no_sync.
DdpRun train_ddp(int k, int steps, int64_t rows, int micro = 1, bool trace = false,
               DdpOptions ddp_options = {}) {
  SimMachine machine(load_topology("dgx-h100"));
  const Topology& topo = machine.topology();
  ThreadGroupOptions options;
  options.topology = &topo;
  options.timeout = std::chrono::seconds(60);
  auto group = make_thread_group(k, options);
  DdpRun out;
  out.weights.resize(static_cast<size_t>(k));
  out.stats.resize(static_cast<size_t>(k));
  out.events.resize(static_cast<size_t>(k));
  out.errors.resize(static_cast<size_t>(k));
  std::vector<Process*> processes;
  for (int r = 0; r < k; ++r) processes.push_back(&machine.spawn("rank" + std::to_string(r)));
  std::vector<std::thread> threads;
  for (int r = 0; r < k; ++r)
    threads.emplace_back([&, r] {
      const size_t me = static_cast<size_t>(r);
      try {
        TraceBus bus;
        if (trace) bus.subscribe([&out, me](const TraceEvent& e) { out.events[me].push_back(e); });
        Runtime rt(machine.attach(*processes[me], &bus), bus);
        rt.set_device(r);
        OpContext ctx{rt, r, 0};
        MLP model(rt, r, kSizes);
        model.init_parameters(ctx, 11 + static_cast<uint64_t>(r));
        DistributedDataParallel ddp(rt, model, *group[me], ddp_options);
        SGD opt(model.parameters(), 0.1f, 0.9f);
        CrossEntropyLoss ce;
        const int64_t per_rank = rows / k, n = per_rank / micro;
        for (int step = 0; step < steps; ++step) {
          const GlobalBatch g = global_batch(rows, step);
          for (int m = 0; m < micro; ++m) {
            auto fwd = [&](const Tensor& x) { return ddp.forward(ctx, x); };
            Tensor d = forward_loss(ctx, fwd, ce, g, r * per_rank + m * n, n, 1.0f / static_cast<float>(micro));
            if (m + 1 < micro) {
              DistributedDataParallel::NoSync no_sync(ddp);
              ddp.backward(ctx, d);
            } else {
              ddp.backward(ctx, d);
            }
          }
          opt.step(ctx);
          opt.zero_grad(ctx);
        }
        out.weights[me] = weights_of(ctx, model);
        out.stats[me] = ddp.stats();
        if (r == 0) out.buckets.push_back(ddp.bucket_bytes());
      } catch (const std::exception& e) {
        out.errors[me] = e.what();
        group[me]->abort(e.what());
      }
    });
  for (std::thread& t : threads) t.join();
  return out;
}

// The fp32 reassociation bound of DataParallel's equivalence test (test_parallel.cpp): each
// gradient element is a sum over the batch, added in another order (k partial sums, each divided
// by k first); over 5 momentum steps the weights differ by a few 1e-7 at most.
constexpr float kAtol = 1e-6f, kRtol = 1e-5f;
// Except where reassociation moves a hidden unit's pre-activation across 0 for one sample: its
// ReLU then passes that sample's gradient in one run and not in the other, and the unit's whole
// row of weights (and its bias) differ by that sample's share. Measured with OpenBLAS's Haswell
// kernel: k = 3 flips unit 438 of the second layer (its 512 weights and bias, up to 1.3e-5 apart;
// everything else within 1.2e-8). So each layer may have one such unit, within kFlipAtol.
constexpr float kFlipAtol = 1e-3f;

float expect_close(const Weights& got, const Weights& want, const std::string& what) {
  float worst = 0;
  EXPECT_EQ(got.size(), want.size()) << what;
  std::vector<std::set<size_t>> flipped_units(kSizes.size());  // by layer: the units out of bounds
  for (size_t p = 0; p < std::min(got.size(), want.size()); ++p) {
    const size_t layer = p / 2, inputs = p % 2 == 0 ? static_cast<size_t>(kSizes[layer]) : 1;
    for (size_t i = 0; i < want[p].size(); ++i) {
      const float diff = std::fabs(got[p][i] - want[p][i]);
      if (std::isnan(diff)) {  // never close, and never the layer's one flipped unit
        ADD_FAILURE() << what << ": param " << p << "[" << i << "] " << got[p][i] << " vs " << want[p][i];
        return INFINITY;
      }
      worst = std::max(worst, diff);
      if (diff - kRtol * std::fabs(want[p][i]) <= kAtol) continue;
      flipped_units[layer].insert(i / inputs);
      if (diff > kFlipAtol || flipped_units[layer].size() > 1) {
        ADD_FAILURE() << what << ": param " << p << "[" << i << "] " << got[p][i] << " vs " << want[p][i]
                      << " (layer " << layer << ", unit " << i / inputs << ")";
        return worst;
      }
    }
  }
  return worst;
}

void expect_ddp_equals_one_device_and_dp(int k) {
  constexpr int kSteps = 5;
  const int64_t rows = 16 * k;
  const DdpRun ddp = train_ddp(k, kSteps, rows);
  for (const std::string& e : ddp.errors) ASSERT_EQ(e, "");
  // Every rank holds the same bits: the same broadcast start, the same averaged gradients.
  for (int r = 1; r < k; ++r) EXPECT_EQ(ddp.weights[static_cast<size_t>(r)], ddp.weights[0]) << "rank " << r;
  const float vs_one = expect_close(ddp.weights[0], train_one_device(kSteps, rows), "DDP vs one device");
  const float vs_dp = expect_close(ddp.weights[0], train_data_parallel(k, kSteps, rows), "DDP vs DataParallel");
  std::printf("[ equivalence ] DDP k=%d, %lld rows per rank: max |w_ddp - w_1| = %.3g, max |w_ddp - w_dp| = %.3g\n",
              k, static_cast<long long>(rows / k), vs_one, vs_dp);
}

TEST(DdpEquivalence, TwoRanks) { expect_ddp_equals_one_device_and_dp(2); }
TEST(DdpEquivalence, ThreeRanks) { expect_ddp_equals_one_device_and_dp(3); }
TEST(DdpEquivalence, FourRanks) { expect_ddp_equals_one_device_and_dp(4); }
TEST(DdpEquivalence, EightRanks) { expect_ddp_equals_one_device_and_dp(8); }

// On the simulator each weight GEMM writes grad / world_size into its bucket itself: every rank's
// weights after three steps are those of the GEMM and the scale run apart, bit for bit, and the
// modelled communication is the same.
TEST(DdpScaleInWeightGemm, EveryRanksWeightsAreThoseOfTheUnfusedKernelsBitForBit) {
  CpuGemmThreadsScope one_blas_thread(1);  // as the trainer runs its ranks
  for (int k : {2, 3, 4}) {
    const int64_t rows = 32 * k;
    const float alpha = 1.0f / static_cast<float>(k);
    for (size_t l = 0; l + 1 < kSizes.size(); ++l)
      if (!parallel::scaled_is_exact(kSizes[l + 1], kSizes[l], 32, alpha))
        GTEST_SKIP() << "this OpenBLAS does not apply alpha with one rounding: never fused here";
    DdpOptions unfused;
    unfused.scale_in_weight_gemm = false;
    const DdpRun fused_run = train_ddp(k, 3, rows);
    const DdpRun unfused_run = train_ddp(k, 3, rows, 1, false, unfused);
    for (int r = 0; r < k; ++r) {
      const size_t me = static_cast<size_t>(r);
      ASSERT_EQ(fused_run.errors[me], "");
      ASSERT_EQ(unfused_run.errors[me], "");
      const Weights& a = fused_run.weights[me];
      const Weights& b = unfused_run.weights[me];
      ASSERT_EQ(a.size(), b.size());
      for (size_t p = 0; p < a.size(); ++p)
        EXPECT_EQ(std::memcmp(a[p].data(), b[p].data(), a[p].size() * sizeof(float)), 0)
            << "k=" << k << " rank " << r << " parameter " << p;
      // The fused path ran (three layers' weights in each of three backwards), the other did not,
      // and the modelled all-reduces and their exposure did not move.
      const DdpCommStats& f = fused_run.stats[me];
      const DdpCommStats& u = unfused_run.stats[me];
      EXPECT_EQ(f.scaled_in_gemm, 9) << "k=" << k << " rank " << r;
      EXPECT_EQ(u.scaled_in_gemm, 0) << "k=" << k << " rank " << r;
      EXPECT_EQ(f.all_reduces, u.all_reduces);
      EXPECT_EQ(f.bytes, u.bytes);
      EXPECT_EQ(f.comm_s, u.comm_s);
      EXPECT_EQ(f.exposed_s, u.exposed_s);
    }
    // Not vacuous: the weights moved from where they started.
    EXPECT_NE(fused_run.weights[0], train_ddp(k, 0, rows).weights[0]) << "k=" << k;
  }
}

// Four micro-batches per step, the first three under no_sync: one all-reduce per optimizer step,
// and the weights of one device on the whole batch.
TEST(DdpNoSync, AccumulationUnderNoSyncEqualsOneBigBatch) {
  constexpr int kK = 2, kSteps = 3, kMicro = 4;
  const int64_t rows = kK * kMicro * 8;
  const DdpRun ddp = train_ddp(kK, kSteps, rows, kMicro);
  for (const std::string& e : ddp.errors) ASSERT_EQ(e, "");
  EXPECT_EQ(ddp.weights[1], ddp.weights[0]);
  expect_close(ddp.weights[0], train_one_device(kSteps, rows), "DDP no_sync vs one device");
  EXPECT_EQ(ddp.stats[0].backwards, kSteps);  // the synchronised ones
  // Step 1: one bucket; steps 2 and 3: the two rebuilt buckets.
  EXPECT_EQ(ddp.stats[0].all_reduces, 1 + 2 * (kSteps - 1));
}

// The reference MLP's buckets as PyTorch 1.13 rebuilds them (semantics.md section 7): the last
// layers' 1,071,144 bytes, then the first layer's 1,607,680; the bytes all-reduced per step are
// the gradients' (2,678,824).
TEST(DdpBuckets, TheReferenceMlpRebuildsIntoPyTorchsTwoBuckets) {
  const DdpRun ddp = train_ddp(2, 3, 32);
  for (const std::string& e : ddp.errors) ASSERT_EQ(e, "");
  ASSERT_EQ(ddp.buckets.size(), 1u);
  EXPECT_EQ(ddp.buckets[0], (std::vector<size_t>{1071144, 1607680}));
  EXPECT_EQ(ddp.stats[0].bytes, 3u * 2678824u);
}

// On NVLink the second bucket's all-reduce starts while the first layer's backward is still
// running: an all_reduce event on the communication stream begins before the last backward kernel
// of the compute stream ends. Iteration 1 has one bucket, so its all-reduce starts after all of it.
TEST(DdpOverlap, ABucketsAllReduceStartsBeforeBackwardEnds) {
  const DdpRun ddp = train_ddp(2, 2, 256, 1, /*trace=*/true);
  for (const std::string& e : ddp.errors) ASSERT_EQ(e, "");
  for (const auto& events : ddp.events) {
    // The all-reduces on the communication stream, and when the last backward kernel ended.
    double backward_end = 0;
    std::vector<const TraceEvent*> reduces;
    for (const TraceEvent& e : events) {
      if (e.stream == ProcessGroup::kCommStream && std::string(e.name) == "all_reduce") reduces.push_back(&e);
      if (e.stream == 0 && std::string(e.name).rfind("linear_backward", 0) == 0) backward_end = std::max(backward_end, e.start_s + e.dur_s);
    }
    // 1 bucket in step 1, 2 in step 2.
    ASSERT_EQ(reduces.size(), 3u);
    EXPECT_LT(reduces[1]->start_s, backward_end) << "the rebuilt first bucket overlaps the rest of backward";
    EXPECT_GT(reduces[1]->dur_s, 0.0);
  }
  EXPECT_GT(ddp.stats[0].comm_s, ddp.stats[0].exposed_s);  // some of it was hidden
}

// The broadcast at construction: ranks initialised differently start from rank 0's parameters.
TEST(DdpConstruction, RankZerosParametersReachEveryRank) {
  const DdpRun ddp = train_ddp(3, 0, 48);
  for (const std::string& e : ddp.errors) ASSERT_EQ(e, "");
  EXPECT_EQ(ddp.weights[1], ddp.weights[0]);
  EXPECT_EQ(ddp.weights[2], ddp.weights[0]);
  EXPECT_EQ(ddp.weights[0], train_one_device(0, 48));  // seed 11: rank 0's
}

}  // namespace
}  // namespace furnace
