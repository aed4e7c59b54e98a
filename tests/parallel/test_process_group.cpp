// ProcessGroup (furnace/process_group.h) with ranks on threads: all_reduce sums in rank order and
// gives every rank the same bits, broadcast copies the root's tensor, barrier holds every rank
// until the last arrives; all_reduce_async returns before the others arrive; ranks that disagree
// get one error each, a rank that never comes is a timeout error, never a hang; on the simulator
// every rank's clock waits for the last rank and then runs NCCL's ring over the links of the
// ranks' GPUs; a backend whose memory the host cannot read gives the same bits through the host.
// Each rank has its own Runtime, as a process has.
// This executable carries the ctest label "threads" (the tsan preset runs it).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "furnace/error.h"
#include "furnace/process_group.h"
#include "furnace/sim_machine.h"
#include "furnace/topology.h"
#include "support/fake_device_backend.h"
#include "support/rank_threads.h"  // defines: on_threads
#include "support/test_support.h"  // defines: upload, download

namespace furnace {
namespace {

using test_support::download;
using test_support::upload;

// One rank: its own Runtime over its own view of the machine, on `device`.
struct Rank {
  TraceBus bus;
  std::unique_ptr<Runtime> rt;
  int device = 0;
};

// `world` ranks on a private simulated `topology` each (rank r on cuda:r), or on the fake device
// backend whose memory the host may not read.
std::vector<std::unique_ptr<Rank>> make_ranks(int world, const Topology& topology, bool fake = false) {
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < world; ++r) {
    auto rank = std::make_unique<Rank>();
    std::unique_ptr<Backend> backend;
    if (fake)
      backend = std::make_unique<testing_support::FakeDeviceBackend>(topology, &rank->bus,
                                                                     testing_support::FakeDeviceBackend::Options{});
    else
      backend = make_sim_backend(topology, &rank->bus);
    rank->rt = std::make_unique<Runtime>(std::move(backend), rank->bus);
    rank->device = r;
    ranks.push_back(std::move(rank));
  }
  return ranks;
}

using test_support::on_threads;  // support/rank_threads.h

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Rank r's values: element 0 is 1e8, 1, -1e8, 1 for ranks 0..3, whose sum in rank order is
// ((1e8 + 1) - 1e8) + 1 = 1 in fp32 (1e8 + 1 rounds to 1e8), and 2 in other orders.
std::vector<float> values_of(int rank, int n) {
  const float first[] = {1e8f, 1.0f, -1e8f, 1.0f};
  std::vector<float> v(static_cast<size_t>(n));
  v[0] = first[rank % 4];
  for (int i = 1; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(rank * 100 + i) * 0.25f;
  return v;
}

// Every rank r, on its thread: values_of(r, n) on its device, `collective` on them, and back.
struct Results {
  std::vector<std::vector<float>> values;  // per rank
  std::vector<std::string> errors;         // per rank; "" for none
};
Results run_collective(std::vector<std::unique_ptr<Rank>>& ranks,
                       std::vector<std::unique_ptr<ProcessGroup>>& group, int n,
                       const std::function<void(ProcessGroup&, OpContext&, Tensor&)>& collective) {
  const int world = static_cast<int>(ranks.size());
  Results out;
  out.values.resize(ranks.size());
  out.errors = on_threads(world, [&](int r) {
    Rank& me = *ranks[static_cast<size_t>(r)];
    OpContext ctx{*me.rt, me.device, 0};
    Tensor t = upload(*me.rt, me.device, values_of(r, n), {n});
    ProcessGroup& pg = *group[static_cast<size_t>(r)];
    EXPECT_EQ(pg.rank(), r);
    EXPECT_EQ(pg.size(), world);
    collective(pg, ctx, t);
    out.values[static_cast<size_t>(r)] = download(*me.rt, t);
  });
  return out;
}

void expect_all_reduce_in_rank_order(bool fake) {
  constexpr int kWorld = 4, kN = 1000;
  auto ranks = make_ranks(kWorld, load_topology("dgx-h100"), fake);
  auto group = make_thread_group(kWorld);
  const Results res = run_collective(ranks, group, kN, [](ProcessGroup& pg, OpContext& ctx, Tensor& t) {
    pg.all_reduce(ctx, t);
  });
  const auto& got = res.values;
  for (const std::string& e : res.errors) EXPECT_EQ(e, "");
  EXPECT_EQ(got[0][0], 1.0f) << "the sum in rank order ((t0 + t1) + t2) + t3";
  for (int i = 1; i < kN; ++i) {
    float expected = 0;
    for (int r = 0; r < kWorld; ++r) expected += values_of(r, kN)[static_cast<size_t>(i)];
    ASSERT_EQ(got[0][static_cast<size_t>(i)], expected) << i;
  }
  for (int r = 1; r < kWorld; ++r)
    for (int i = 0; i < kN; ++i)
      ASSERT_EQ(bits(got[static_cast<size_t>(r)][static_cast<size_t>(i)]), bits(got[0][static_cast<size_t>(i)]))
          << "rank " << r << " element " << i;
}

TEST(ProcessGroup, AllReduceSumsInRankOrderAndEveryRankGetsTheSameBits) {
  expect_all_reduce_in_rank_order(/*fake=*/false);
}

TEST(ProcessGroup, ABackendTheHostCannotReadGivesTheSameBitsThroughTheHost) {
  expect_all_reduce_in_rank_order(/*fake=*/true);
}

TEST(ProcessGroup, BroadcastCopiesTheRootsTensorToEveryRank) {
  constexpr int kWorld = 3, kN = 64;
  auto ranks = make_ranks(kWorld, load_topology("workstation-4x3090"));
  auto group = make_thread_group(kWorld);
  const Results res = run_collective(ranks, group, kN, [](ProcessGroup& pg, OpContext& ctx, Tensor& t) {
    pg.broadcast(ctx, t, /*root=*/2);
  });
  for (const std::string& e : res.errors) EXPECT_EQ(e, "");
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(res.values[static_cast<size_t>(r)], values_of(2, kN)) << "rank " << r;
}

TEST(ProcessGroup, BarrierHoldsEveryRankUntilTheLastArrives) {
  constexpr int kWorld = 4;
  auto group = make_thread_group(kWorld);
  std::atomic<int> before{0};
  std::vector<int> seen(kWorld, -1);
  const auto errors = on_threads(kWorld, [&](int r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10 * r));  // rank 3 comes last
    ++before;
    group[static_cast<size_t>(r)]->barrier();
    seen[static_cast<size_t>(r)] = before.load();
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], kWorld) << "rank " << r;
}

TEST(ProcessGroup, RanksThatDisagreeEachGetOneErrorNamingWhatTheyPassed) {
  constexpr int kWorld = 3;
  auto ranks = make_ranks(kWorld, load_topology("workstation-4x3090"));
  auto group = make_thread_group(kWorld);
  const auto errors = on_threads(kWorld, [&](int r) {
    Rank& me = *ranks[static_cast<size_t>(r)];
    OpContext ctx{*me.rt, me.device, 0};
    const int n = r == 1 ? 10 : 12;
    Tensor t = upload(*me.rt, me.device, values_of(r, n), {n});
    group[static_cast<size_t>(r)]->all_reduce(ctx, t);
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("all_reduce: rank 0 passed 12 float32 elements, rank 1 passed 10 float32 elements"),
              std::string::npos)
        << e;
  // The group still works: the next collective, called alike, succeeds.
  const auto again = on_threads(kWorld, [&](int r) { group[static_cast<size_t>(r)]->barrier(); });
  for (const std::string& e : again) EXPECT_EQ(e, "");
  const auto different = on_threads(kWorld, [&](int r) {
    Rank& me = *ranks[static_cast<size_t>(r)];
    OpContext ctx{*me.rt, me.device, 0};
    Tensor t = upload(*me.rt, me.device, values_of(r, 4), {4});
    if (r == 2) group[static_cast<size_t>(r)]->broadcast(ctx, t, 0);
    else group[static_cast<size_t>(r)]->all_reduce(ctx, t);
  });
  for (const std::string& e : different)
    EXPECT_NE(e.find("rank 0 called all_reduce, rank 2 called broadcast"), std::string::npos) << e;
}

TEST(ProcessGroup, ARankThatNeverComesIsATimeoutOnTheOthersNotAHang) {
  constexpr int kWorld = 3;
  auto ranks = make_ranks(kWorld, load_topology("workstation-4x3090"));
  ThreadGroupOptions options;
  options.timeout = std::chrono::milliseconds(200);
  auto group = make_thread_group(kWorld, options);
  const auto started = std::chrono::steady_clock::now();
  const auto errors = on_threads(kWorld, [&](int r) {
    if (r == 2) return;  // this rank stopped
    Rank& me = *ranks[static_cast<size_t>(r)];
    OpContext ctx{*me.rt, me.device, 0};
    Tensor t = upload(*me.rt, me.device, values_of(r, 8), {8});
    group[static_cast<size_t>(r)]->all_reduce(ctx, t);
  });
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(waited, 5.0);
  for (int r = 0; r < 2; ++r)
    EXPECT_NE(errors[static_cast<size_t>(r)].find("waited 200 ms in all_reduce for the other ranks; 2 of 3 arrived"),
              std::string::npos)
        << errors[static_cast<size_t>(r)];
  // Broken for good, as a c10d group after a timeout: the next call fails at once.
  const auto later = on_threads(1, [&](int) { group[2]->barrier(); });
  EXPECT_NE(later[0].find("waited 200 ms"), std::string::npos) << later[0];
}

// Rank 2 is 5 ms of work behind: every rank's all_reduce starts when it arrives, and all end
// together after NCCL's ring over the NVLink switch (6 steps of a quarter of the bytes).
TEST(ProcessGroup, OnTheSimulatorEveryRankWaitsForTheLastThenRunsTheRing) {
  constexpr int kWorld = 4, kN = 1 << 20;  // 4 MiB
  const Topology topo = load_topology("dgx-h100");
  auto ranks = make_ranks(kWorld, topo);
  ThreadGroupOptions options;
  options.topology = &topo;
  auto group = make_thread_group(kWorld, options);
  std::vector<double> end(kWorld), ready(kWorld);
  const auto errors = on_threads(kWorld, [&](int r) {
    Rank& me = *ranks[static_cast<size_t>(r)];
    OpContext ctx{*me.rt, me.device, 0};
    Tensor t = upload(*me.rt, me.device, values_of(r, kN), {kN});
    if (r == 2) me.rt->backend().model_collective(me.device, 0, "straggler", 0.0, 5e-3, 0);
    ready[static_cast<size_t>(r)] = me.rt->backend().device_time(me.device);
    group[static_cast<size_t>(r)]->all_reduce(ctx, t);
    end[static_cast<size_t>(r)] = me.rt->backend().device_time(me.device);
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  const LinkSpec link = topo.link_between(0, 1);
  ASSERT_EQ(link.kind, LinkKind::nvlink);
  const double bytes = 4.0 * kN;
  const double ring = 6.0 * (bytes / 4.0 / link.bandwidth + link.latency_s);
  EXPECT_DOUBLE_EQ(model_ring_all_reduce_seconds(topo, {0, 1, 2, 3}, bytes), ring);
  const double last = *std::max_element(ready.begin(), ready.end());
  EXPECT_DOUBLE_EQ(last, ready[2]);
  for (int r = 0; r < kWorld; ++r) EXPECT_DOUBLE_EQ(end[static_cast<size_t>(r)], last + ring) << "rank " << r;
}

// all_reduce_async returns before the other ranks arrive (NCCL queues the kernel and the host
// goes on): rank 0 launches, then lets the others start. Rank 0 sleeping at its launch until the
// last rank arrived would leave them waiting for it: a timeout, not a result. (Its next launch
// waits for them: that collective's start is the end of this one.) The clocks are those of
// ranks that launch together: each collective on the communication stream from when the last
// rank's stream got there.
TEST(ProcessGroup, AnAsyncAllReduceReturnsBeforeTheOtherRanksArrive) {
  constexpr int kWorld = 3, kN = 4096;
  const Topology topo = load_topology("dgx-h100");
  auto ranks = make_ranks(kWorld, topo);
  ThreadGroupOptions options;
  options.topology = &topo;
  options.timeout = std::chrono::milliseconds(20000);
  auto group = make_thread_group(kWorld, options);
  std::atomic<bool> launched{false};
  std::vector<std::vector<float>> first(kWorld), second(kWorld);
  std::vector<double> comm_end(kWorld), seconds(kWorld);
  const auto errors = on_threads(kWorld, [&](int r) {
    Rank& me = *ranks[static_cast<size_t>(r)];
    OpContext ctx{*me.rt, me.device, 0};
    Tensor a = upload(*me.rt, me.device, values_of(r, kN), {kN});
    Tensor b = upload(*me.rt, me.device, values_of(r + 1, 2 * kN), {2 * kN});
    ProcessGroup& pg = *group[static_cast<size_t>(r)];
    if (r != 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!launched && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      ASSERT_TRUE(launched) << "rank 0 is still inside all_reduce_async";
    }
    auto wa = pg.all_reduce_async(ctx, a);
    if (r == 0) launched = true;
    auto wb = pg.all_reduce_async(ctx, b);
    wb->wait(ctx);
    wa->wait(ctx);
    seconds[static_cast<size_t>(r)] = wa->modelled_seconds() + wb->modelled_seconds();
    comm_end[static_cast<size_t>(r)] = me.rt->backend().stream_time(me.device, ProcessGroup::kCommStream);
    first[static_cast<size_t>(r)] = download(*me.rt, a);
    second[static_cast<size_t>(r)] = download(*me.rt, b);
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  const std::vector<int> ring = {0, 1, 2};
  const double expected = model_ring_all_reduce_seconds(topo, ring, 4.0 * kN) +
                          model_ring_all_reduce_seconds(topo, ring, 8.0 * kN);
  for (int r = 0; r < kWorld; ++r) {
    const auto& a = first[static_cast<size_t>(r)];
    const auto& b = second[static_cast<size_t>(r)];
    ASSERT_EQ(a.size(), size_t{kN});
    ASSERT_EQ(b.size(), size_t{2 * kN});
    for (int i = 1; i < kN; ++i)
      ASSERT_EQ(a[static_cast<size_t>(i)], values_of(0, kN)[static_cast<size_t>(i)] + values_of(1, kN)[static_cast<size_t>(i)] +
                                               values_of(2, kN)[static_cast<size_t>(i)])
          << "rank " << r << " element " << i;
    for (int i = 1; i < 2 * kN; ++i)
      ASSERT_EQ(b[static_cast<size_t>(i)], values_of(1, 2 * kN)[static_cast<size_t>(i)] +
                                               values_of(2, 2 * kN)[static_cast<size_t>(i)] +
                                               values_of(3, 2 * kN)[static_cast<size_t>(i)])
          << "rank " << r << " element " << i;
    EXPECT_DOUBLE_EQ(seconds[static_cast<size_t>(r)], expected) << "rank " << r;
    // Every device's streams started at 0 after the uploads' copies, the same on every rank.
    EXPECT_DOUBLE_EQ(comm_end[static_cast<size_t>(r)], comm_end[0]) << "rank " << r;
  }
}

// A Work dropped without wait(): its bytes still arrive (the next collective settles it), and a
// group whose ranks left a collective unwaited is destroyed without a hang.
TEST(ProcessGroup, AWorkDroppedWithoutWaitStillEndsItsCollective) {
  constexpr int kWorld = 2, kN = 256;
  auto ranks = make_ranks(kWorld, load_topology("workstation-4x3090"));
  auto group = make_thread_group(kWorld);
  std::vector<std::vector<float>> got(kWorld);
  const auto errors = on_threads(kWorld, [&](int r) {
    Rank& me = *ranks[static_cast<size_t>(r)];
    OpContext ctx{*me.rt, me.device, 0};
    Tensor t = upload(*me.rt, me.device, values_of(r, kN), {kN});
    group[static_cast<size_t>(r)]->all_reduce_async(ctx, t);  // dropped: its destructor waits
    got[static_cast<size_t>(r)] = download(*me.rt, t);
    group[static_cast<size_t>(r)]->barrier();
    Tensor u = upload(*me.rt, me.device, values_of(r, kN), {kN});
    group[static_cast<size_t>(r)]->all_reduce_async(ctx, u);  // never waited: the group's destructor
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  for (int r = 0; r < kWorld; ++r)
    EXPECT_EQ(got[static_cast<size_t>(r)][1], values_of(0, kN)[1] + values_of(1, kN)[1]) << "rank " << r;
  group.clear();
}

// Ranks as torchrun starts them: processes on one machine, each seeing one GPU through
// CUDA_VISIBLE_DEVICES (cuda:0 everywhere); the ring crosses the GPUs they really are.
TEST(ProcessGroup, RanksAsProcessesOfOneMachineRingOverTheirPhysicalGpus) {
  const Topology topo = load_topology("workstation-4x3090");
  SimMachine machine(topo);
  constexpr int kWorld = 2, kN = 256 * 1024;
  const int gpus[kWorld] = {1, 3};
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < kWorld; ++r) {
    auto rank = std::make_unique<Rank>();
    Process& p = machine.spawn("rank" + std::to_string(r), Environment{{"CUDA_VISIBLE_DEVICES", std::to_string(gpus[r])}});
    rank->rt = std::make_unique<Runtime>(machine.attach(p, &rank->bus), rank->bus);
    ranks.push_back(std::move(rank));
  }
  ThreadGroupOptions options;
  options.topology = &topo;
  auto group = make_thread_group(kWorld, options);
  std::vector<std::vector<float>> got(kWorld);
  std::vector<double> spent(kWorld);
  const auto errors = on_threads(kWorld, [&](int r) {
    Rank& me = *ranks[static_cast<size_t>(r)];
    OpContext ctx{*me.rt, 0, 0};
    Tensor t = upload(*me.rt, 0, values_of(r, kN), {kN});
    EXPECT_EQ(me.rt->backend().physical_index(0), gpus[r]);
    const double before = me.rt->backend().device_time(0);
    group[static_cast<size_t>(r)]->all_reduce(ctx, t);
    spent[static_cast<size_t>(r)] = me.rt->backend().device_time(0) - before;
    got[static_cast<size_t>(r)] = download(*me.rt, t);
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[0][1], values_of(0, kN)[1] + values_of(1, kN)[1]);
  // No NVLink on this machine: the ring's two hops go through the host.
  const LinkSpec link = topo.link_between(1, 3);
  EXPECT_EQ(link.kind, LinkKind::pcie);
  const double ring = 2.0 * (4.0 * kN / 2.0 / link.bandwidth + link.latency_s);
  // Both ranks arrive together (the same work before): each spends exactly the ring.
  EXPECT_NEAR(spent[0], ring, ring * 1e-9);
  EXPECT_NEAR(spent[1], ring, ring * 1e-9);
}

TEST(ProcessGroup, ARankMustPassAnF32TensorOnItsDevice) {
  auto ranks = make_ranks(1, load_topology("workstation-4x3090"));
  auto group = make_thread_group(1);
  Runtime& rt = *ranks[0]->rt;
  OpContext ctx{rt, 0, 0};
  Tensor on_1 = upload(rt, 1, {1.0f, 2.0f}, {2});
  EXPECT_THROW(
      {
        try {
          group[0]->all_reduce(ctx, on_1);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("all_reduce: rank 0's tensor is on cuda:1, expected cuda:0"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  Tensor mine = upload(rt, 0, {1.0f, 2.0f}, {2});
  group[0]->all_reduce(ctx, mine);  // a group of one: the tensor as it was
  EXPECT_EQ(download(rt, mine), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_THROW(group[0]->broadcast(ctx, mine, 1), Error);
  EXPECT_THROW(make_thread_group(0), Error);
}

}  // namespace
}  // namespace furnace
