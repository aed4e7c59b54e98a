// DDP between processes on real GPUs (NCCL), SKIPPED with fewer than two devices:
//   - the NCCL process group, ranks on threads with a Runtime each (as processes would have):
//     all_reduce gives the exact sums on every rank, broadcast copies the root's tensor, and ranks
//     that call different collectives get an error (the header check, or the timeout), not a hang;
//   - `furnace launch --nproc-per-node 2 -- furnace train --parallel ddp --backend cuda` trains
//     the weights of the in-process simulated DDP (`--nproc 2 --backend sim`).
// Bound for the weights: cuBLAS and OpenBLAS add the same fp32 products in different orders, and
// NCCL's ring adds the two ranks' gradients (a + b, exact either way); after 8 SGD steps (lr 0.1,
// momentum 0.9) on weights of size ~0.05 the two differ by rounding, well under 1e-4, while a wrong
// reduction (no averaging, a rank's gradient missing, another rank's batch) moves them by lr x
// gradient, 1e-3 or more.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda/cuda_test_support.h"
#include "furnace/checkpoint.h"  // defines: read_checkpoint
#include "furnace/nccl_group.h"
#include "furnace/tcp_store.h"
#include "integration/cli_harness.h"  // defines: CliHarness, CliRun
#include "support/rank_threads.h"     // defines: on_threads

namespace furnace {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

using test_support::on_threads;  // support/rank_threads.h

// Rank r's values: small integers times a power of two, so that every sum is exact.
std::vector<float> values_of(int rank, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(rank * 1000 + i % 997) * 0.25f - 3.0f;
  return v;
}

// One rank as a process has it: a store client, a Runtime over the real GPUs on cuda:rank, and
// its handle on the NCCL group.
struct NcclRank {
  NcclRank(const TcpStore& host, int r, int world, milliseconds timeout)
      : store("127.0.0.1", host.port(), false, timeout + milliseconds(10000)), ctx{m.rt, r, 0} {
    m.rt.set_device(r);
    NcclGroupOptions o;
    o.timeout = timeout;
    group = make_nccl_group(store, r, world, r, o);
  }
  TcpStore store;
  cuda_test::CudaMachine m;
  OpContext ctx;
  std::unique_ptr<ProcessGroup> group;
};

class CudaNcclGroup : public ::testing::Test {
 protected:
  void SetUp() override { FURNACE_REQUIRE_CUDA_DEVICES(2); }
};

TEST_F(CudaNcclGroup, AllReduceAndBroadcastBetweenTwoRanks) {
  const int world = 2, n = 100003;
  TcpStore host("127.0.0.1", 0, true, milliseconds(30000));
  std::vector<std::vector<float>> summed(world), broadcast(world);
  const auto errors = on_threads(world, [&](int r) {
    NcclRank rank(host, r, world, milliseconds(30000));
    Runtime& rt = rank.m.rt;
    OpContext& ctx = rank.ctx;
    ProcessGroup* g = rank.group.get();
    Tensor t = cuda_test::upload(rt, r, values_of(r, n), {n});
    g->all_reduce(ctx, t);
    summed[static_cast<size_t>(r)] = cuda_test::download(rt, t);
    Tensor b = cuda_test::upload(rt, r, values_of(r + 5, 1000), {1000});
    g->broadcast(ctx, b, 1);
    broadcast[static_cast<size_t>(r)] = cuda_test::download(rt, b);
    g->barrier();
  });
  for (const std::string& e : errors) ASSERT_EQ(e, "");
  std::vector<float> want(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    want[static_cast<size_t>(i)] = values_of(0, n)[static_cast<size_t>(i)] + values_of(1, n)[static_cast<size_t>(i)];
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(summed[static_cast<size_t>(r)], want) << "rank " << r;
    EXPECT_EQ(broadcast[static_cast<size_t>(r)], values_of(6, 1000)) << "rank " << r;
  }
}

TEST_F(CudaNcclGroup, RanksThatCallDifferentCollectivesGetAnErrorNotAHang) {
  const int world = 2;
  TcpStore host("127.0.0.1", 0, true, milliseconds(20000));
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = on_threads(world, [&](int r) {
    NcclRank rank(host, r, world, milliseconds(10000));
    Runtime& rt = rank.m.rt;
    OpContext& ctx = rank.ctx;
    ProcessGroup* g = rank.group.get();
    Tensor t = cuda_test::upload(rt, r, values_of(r, 64), {64});
    g->all_reduce(ctx, t);  // the communicator, made together
    Tensor u = cuda_test::upload(rt, r, values_of(r, r == 0 ? 4096 : 1024), {r == 0 ? 4096 : 1024});
    g->all_reduce(ctx, u);
    cuda_test::download(rt, u);  // the host waits for the stream: released by the abort
    g->barrier();                // the error, once the watchdog has seen it
  });
  for (int r = 0; r < world; ++r)
    EXPECT_THAT(errors[static_cast<size_t>(r)], HasSubstr("ProcessGroup (nccl)")) << "rank " << r;
  EXPECT_THAT(errors[0] + errors[1], HasSubstr("every rank must call the same collective"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 40.0);
}

class CudaDdpLaunch : public cli_test::CliHarness {
 protected:
  void SetUp() override {
    CliHarness::SetUp();
    FURNACE_REQUIRE_CUDA_DEVICES(2);
  }
  std::string train_args(const std::string& checkpoint, const std::string& more) {
    return "train --parallel ddp --data " + slice() + " --epochs 1 --steps 8 --batch 64 --lr-schedule constant "
           "--checkpoint " + (dir_ / checkpoint).string() + " --json " + more;
  }
};

TEST_F(CudaDdpLaunch, TwoGpuProcessesTrainTheWeightsOfTheSimulatedDdp) {
  const cli_test::CliRun gpus = furnace("launch --nproc-per-node 2 --master-port 0 -- " + std::string(FURNACE_CLI) +
                                        " " + train_args("gpus.ckpt", "--backend cuda"));
  ASSERT_EQ(gpus.status, 0) << gpus.out << gpus.err;
  const cli_test::CliRun sim =
      furnace(train_args("sim.ckpt", "--backend sim --topology workstation-4x3090 --nproc 2"));
  ASSERT_EQ(sim.status, 0) << sim.err;
  const size_t at = gpus.out.rfind("[rank0]:");
  const nlohmann::json j = nlohmann::json::parse(at == std::string::npos ? gpus.out : gpus.out.substr(at + 8));
  EXPECT_EQ(j["backend"], "cuda");
  EXPECT_EQ(j["ddp"]["launcher"]["backend"], "nccl");
  EXPECT_EQ(j["ddp"]["world"], 2);
  EXPECT_EQ(j["steps"], sim.last_json()["steps"]);
  const Checkpoint a = read_checkpoint((dir_ / "gpus.ckpt").string());
  const Checkpoint b = read_checkpoint((dir_ / "sim.ckpt").string());
  ASSERT_EQ(a.model.size(), b.model.size());
  double worst = 0;
  for (size_t t = 0; t < a.model.size(); ++t) {
    ASSERT_EQ(a.model[t].name, b.model[t].name);
    ASSERT_EQ(a.model[t].values.size(), b.model[t].values.size());
    for (size_t i = 0; i < a.model[t].values.size(); ++i) {
      const double diff = std::fabs(static_cast<double>(a.model[t].values[i]) - b.model[t].values[i]);
      worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);  // a NaN never matches
    }
  }
  std::printf("[ nccl vs sim ] largest weight difference after 8 steps: %.3g\n", worst);
  EXPECT_LE(worst, 1e-4);
}

}  // namespace
}  // namespace furnace
