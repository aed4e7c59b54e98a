// The NCCL process group's host side, on any machine: its arguments are checked; a barrier before
// the first collective meets through the store (no device yet); a collective on a backend without
// NCCL (the simulator, or cuda built without it) is one line saying so, from Backend's defaults.
// The group on real GPUs is tests/cuda/test_cuda_ddp.cpp (SKIPPED with fewer than two).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "furnace/backend.h"
#include "furnace/error.h"
#include "furnace/nccl_group.h"
#include "furnace/runtime.h"
#include "furnace/tcp_store.h"
#include "furnace/topology.h"
#include "support/test_support.h"  // defines: upload

namespace furnace {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;

const char* const kLoopback = "127.0.0.1";

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(BackendDefaults, ABackendWithoutNcclSaysSoInOneLine) {
  const Topology topology = load_topology("dgx-h100");
  std::unique_ptr<Backend> sim = make_sim_backend(topology, nullptr);
  const std::string line =
      "this backend (sim) has no NCCL: collectives between processes on it go through Gloo (--backend sim); "
      "NCCL needs the cuda backend built with NCCL";
  EXPECT_EQ(error_of([&] { sim->comm_unique_id(); }), line);
  EXPECT_EQ(error_of([&] { sim->make_rank_communicator(std::vector<char>(128), 0, 2, 0, milliseconds(100)); }), line);
}

TEST(NcclGroup, ArgumentsAreCheckedBeforeAnythingStarts) {
  TcpStore store(kLoopback, 0, true, milliseconds(2000));
  EXPECT_EQ(error_of([&] { make_nccl_group(store, 2, 2, 0); }), "rank 2 is not in a group of 2");
  EXPECT_EQ(error_of([&] { make_nccl_group(store, 0, 0, 0); }), "a process group needs at least one rank, got 0");
  EXPECT_EQ(error_of([&] { make_nccl_group(store, 0, 1, -1); }), "a process group's device must be cuda:0 or above, got -1");
  NcclGroupOptions o;
  o.timeout = milliseconds(0);
  EXPECT_EQ(error_of([&] { make_nccl_group(store, 0, 1, 0, o); }), "a process group's timeout must be positive");
  auto g = make_nccl_group(store, 0, 1, 3);
  EXPECT_EQ(g->backend_name(), "nccl");
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->size(), 1);
}

TEST(NcclGroup, ABarrierBeforeTheFirstCollectiveMeetsThroughTheStore) {
  const int world = 3;
  TcpStore host(kLoopback, 0, true, milliseconds(5000));
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        TcpStore store(kLoopback, host.port(), false, milliseconds(5000));
        auto g = make_nccl_group(store, r, world, r);
        g->barrier();
        g->barrier();  // a second one has its own key
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

TEST(NcclGroup, OnTheSimulatorTheFirstCollectiveSaysThereIsNoNccl) {
  const Topology topology = load_topology("dgx-h100");
  TraceBus bus;
  Runtime rt(make_sim_backend(topology, &bus), bus);
  TcpStore store(kLoopback, 0, true, milliseconds(2000));
  auto g = make_nccl_group(store, 0, 1, 0);
  OpContext ctx{rt, 0, 0};
  Tensor t = test_support::upload(rt, 0, std::vector<float>{1, 2, 3}, {3});
  EXPECT_THAT(error_of([&] { g->all_reduce(ctx, t); }), HasSubstr("this backend (sim) has no NCCL"));
  // The tensor and the root are checked first, naming the rank.
  OpContext other{rt, 1, 0};
  EXPECT_THAT(error_of([&] { g->all_reduce(other, t); }), HasSubstr("all_reduce: rank 0's tensor is on cuda:0, expected cuda:1"));
  EXPECT_EQ(error_of([&] { g->broadcast(ctx, t, 1); }), "broadcast: root 1 is not a rank of this group of 1");
  // An aborted group refuses every later call with the reason.
  g->abort("rank 0 failed");
  EXPECT_EQ(error_of([&] { g->barrier(); }), "ProcessGroup (nccl): rank 0 aborted the group: rank 0 failed");
}

}  // namespace
}  // namespace furnace
