// The dist layer on loopback: TcpStore (set, get, add, wait; a get that waits for another rank's
// set; connecting to a port nobody listens on is one line naming the address after the timeout)
// and ProcessGroup (gloo), each rank on a thread of its own with its own store client and Runtime
// as a process would have: all_reduce against the exact sums (bit-equal to the thread group for
// two ranks), broadcast, ranks that call different collectives (the stop check's all_reduce_max
// among them) get one error each, a rank that aborts ends the others' wait at once, one that
// never comes is a timeout; on the simulator the modelled clock waits for the last rank and then
// runs the same ring as the thread group. The store's guards against strangers: test_tcp_store.cpp.
// Every socket is on 127.0.0.1. This executable carries the ctest label "threads" (tsan preset).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "furnace/error.h"
#include "furnace/gloo_group.h"
#include "furnace/launch_env.h"  // defines: pick_free_port
#include "furnace/process_group.h"
#include "furnace/sim_machine.h"
#include "furnace/tcp_store.h"
#include "furnace/topology.h"
#include "support/loopback.h"      // defines: kLoopback, seconds_since, bytes, text
#include "support/rank_threads.h"  // defines: on_threads
#include "support/test_support.h"  // defines: upload, download

namespace furnace {
namespace {

using ::testing::HasSubstr;
using test_support::bytes;
using test_support::Clock;
using test_support::download;
using test_support::kLoopback;
using test_support::seconds_since;
using test_support::text;
using test_support::upload;
using std::chrono::milliseconds;

using test_support::on_threads;  // support/rank_threads.h

TEST(TcpStore, ClientsSeeEachOthersKeysAndAGetWaitsForTheSet) {
  TcpStore host(kLoopback, 0, /*host=*/true, milliseconds(5000));
  ASSERT_GT(host.port(), 0);
  TcpStore client(kLoopback, host.port(), /*host=*/false, milliseconds(5000));
  host.set("a", bytes("one"));
  EXPECT_EQ(text(client.get("a")), "one");
  EXPECT_EQ(client.add("n", 2), 2);
  EXPECT_EQ(host.add("n", 5), 7);
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(100));
    host.set("late", bytes("here"));
  });
  EXPECT_EQ(text(client.get("late")), "here");  // blocks until the other thread's set
  later.join();
  client.wait({"a", "late"});
  EXPECT_THAT([&] { client.wait({"never"}, milliseconds(200)); },
              ::testing::ThrowsMessage<Error>(HasSubstr("never")));
}

TEST(TcpStore, NobodyListeningIsOneLineNamingTheAddressAfterTheTimeout) {
  const int port = pick_free_port(kLoopback);  // free a moment ago: nobody listens there
  const auto t0 = Clock::now();
  try {
    TcpStore client(kLoopback, port, /*host=*/false, milliseconds(1500));
    FAIL() << "connected to a port nobody listens on";
  } catch (const Error& e) {
    const std::string what = e.message();
    EXPECT_THAT(what, HasSubstr("127.0.0.1:" + std::to_string(port))) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  const double waited = seconds_since(t0);
  EXPECT_GE(waited, 1.4);  // it kept trying (rank 0 may start last) ...
  EXPECT_LT(waited, 10.0);  // ... until the timeout, not forever
}

// One rank as a process has it: a store client (rank 0 hosts), a Runtime on its own simulated
// machine or a shared one, a Gloo group.
struct GlooRanks {
  int world;
  Topology topology;
  std::unique_ptr<TcpStore> host;
  std::vector<std::unique_ptr<TcpStore>> stores;
  std::vector<std::unique_ptr<TraceBus>> buses;
  std::vector<std::unique_ptr<Runtime>> runtimes;
  std::vector<std::unique_ptr<GlooGroup>> groups;

  GlooRanks(int n, milliseconds timeout, bool modelled = false)
      : world(n), topology(load_topology("dgx-h100")), stores(n), groups(n) {
    host = std::make_unique<TcpStore>(kLoopback, 0, true, timeout);
    for (int r = 0; r < n; ++r) {
      buses.push_back(std::make_unique<TraceBus>());
      runtimes.push_back(std::make_unique<Runtime>(make_sim_backend(topology, buses.back().get()), *buses.back()));
    }
    // Joining is a collective: every rank at once.
    const auto errors = on_threads(n, [&](int r) {
      stores[static_cast<size_t>(r)] = std::make_unique<TcpStore>(kLoopback, host->port(), false, timeout);
      GlooGroupOptions o;
      o.timeout = timeout;
      if (modelled) o.topology = &topology;
      groups[static_cast<size_t>(r)] = make_gloo_group(*stores[static_cast<size_t>(r)], r, n, o);
    });
    for (const std::string& e : errors) EXPECT_EQ(e, "");
  }
  ~GlooRanks() {
    groups.clear();  // the groups' sockets before the stores
  }
};

// Rank r's values: a pattern whose sum in rank order is exact.
std::vector<float> values_of(int rank, int n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(rank * 1000 + i % 997) * 0.25f - 3.0f;
  return v;
}

std::vector<std::vector<float>> all_reduce_on(GlooRanks& g, int n, std::vector<std::string>* errors_out = nullptr) {
  std::vector<std::vector<float>> got(static_cast<size_t>(g.world));
  const auto errors = on_threads(g.world, [&](int r) {
    Runtime& rt = *g.runtimes[static_cast<size_t>(r)];
    OpContext ctx{rt, r, 0};
    Tensor t = upload(rt, r, values_of(r, n), {n});
    g.groups[static_cast<size_t>(r)]->all_reduce(ctx, t);
    got[static_cast<size_t>(r)] = download(rt, t);
  });
  if (errors_out) *errors_out = errors;
  return got;
}

TEST(GlooGroup, AllReduceSumsAndEveryRankGetsTheSameBits) {
  for (int world : {2, 3, 4}) {
    GlooRanks g(world, milliseconds(20000));
    constexpr int kN = 100000;  // several of Gloo's segments
    std::vector<std::string> errors;
    const auto got = all_reduce_on(g, kN, &errors);
    for (const std::string& e : errors) ASSERT_EQ(e, "") << "world " << world;
    std::vector<std::vector<float>> in;
    for (int r = 0; r < world; ++r) in.push_back(values_of(r, kN));
    for (int i = 0; i < kN; ++i) {
      double exact = 0;
      for (int r = 0; r < world; ++r) exact += in[static_cast<size_t>(r)][static_cast<size_t>(i)];
      // Small multiples of 0.25: every order of the sum is exact in fp32.
      ASSERT_EQ(got[0][static_cast<size_t>(i)], static_cast<float>(exact)) << "world " << world << " element " << i;
    }
    for (int r = 1; r < world; ++r)
      ASSERT_EQ(std::memcmp(got[static_cast<size_t>(r)].data(), got[0].data(), sizeof(float) * kN), 0)
          << "rank " << r << " of " << world;
  }
}

TEST(GlooGroup, TwoRanksGiveTheThreadGroupsBitsOnValuesThatRound) {
  // a + b == b + a in fp32: whatever order Gloo's ring adds two ranks in, the bits are the thread
  // group's (rank order), even where the sum rounds.
  GlooRanks g(2, milliseconds(20000));
  constexpr int kN = 4096;
  std::vector<std::vector<float>> in(2, std::vector<float>(kN));
  for (int i = 0; i < kN; ++i) {
    in[0][static_cast<size_t>(i)] = 1.0f / static_cast<float>(i + 3);
    in[1][static_cast<size_t>(i)] = 1e7f / static_cast<float>(i + 7);
  }
  std::vector<std::vector<float>> got(2);
  const auto errors = on_threads(2, [&](int r) {
    Runtime& rt = *g.runtimes[static_cast<size_t>(r)];
    OpContext ctx{rt, r, 0};
    Tensor t = upload(rt, r, in[static_cast<size_t>(r)], {kN});
    g.groups[static_cast<size_t>(r)]->all_reduce(ctx, t);
    got[static_cast<size_t>(r)] = download(rt, t);
  });
  for (const std::string& e : errors) ASSERT_EQ(e, "");
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(got[0][static_cast<size_t>(i)], in[0][static_cast<size_t>(i)] + in[1][static_cast<size_t>(i)]) << i;
    ASSERT_EQ(got[1][static_cast<size_t>(i)], got[0][static_cast<size_t>(i)]) << i;
  }
}

TEST(GlooGroup, BroadcastCopiesTheRootsTensorAndControlMaxReachesEveryRank) {
  GlooRanks g(3, milliseconds(20000));
  constexpr int kN = 5000;
  std::vector<std::vector<float>> got(3);
  std::vector<std::vector<double>> control(3);
  const auto errors = on_threads(3, [&](int r) {
    Runtime& rt = *g.runtimes[static_cast<size_t>(r)];
    OpContext ctx{rt, r, 0};
    Tensor t = upload(rt, r, values_of(r, kN), {kN});
    g.groups[static_cast<size_t>(r)]->broadcast(ctx, t, 2);
    got[static_cast<size_t>(r)] = download(rt, t);
    control[static_cast<size_t>(r)] = {static_cast<double>(r), -static_cast<double>(r)};
    g.groups[static_cast<size_t>(r)]->all_reduce_max(control[static_cast<size_t>(r)]);
    std::vector<double> signal{r == 1 ? 15.0 : 0.0};  // the stop check: its one value rides in the header
    g.groups[static_cast<size_t>(r)]->all_reduce_max(signal);
    control[static_cast<size_t>(r)].push_back(signal[0]);
    g.groups[static_cast<size_t>(r)]->barrier();
  });
  for (const std::string& e : errors) ASSERT_EQ(e, "");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(r)], values_of(2, kN)) << "rank " << r;
    EXPECT_EQ(control[static_cast<size_t>(r)], (std::vector<double>{2.0, 0.0, 15.0})) << "rank " << r;
  }
}

TEST(GlooGroup, RanksThatCallDifferentCollectivesEachGetOneError) {
  GlooRanks g(3, milliseconds(20000));
  const auto errors = on_threads(3, [&](int r) {
    Runtime& rt = *g.runtimes[static_cast<size_t>(r)];
    OpContext ctx{rt, r, 0};
    const int n = r == 1 ? 7 : 8;  // rank 1 passes a different size
    Tensor t = upload(rt, r, values_of(r, n), {n});
    g.groups[static_cast<size_t>(r)]->all_reduce(ctx, t);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(errors[static_cast<size_t>(r)], HasSubstr("every rank must call the same collective")) << r;
    EXPECT_THAT(errors[static_cast<size_t>(r)], HasSubstr("between 7 and 8 f32 elements")) << r;
  }
  // The group is broken for good: a later call says so at once.
  Runtime& rt = *g.runtimes[0];
  OpContext ctx{rt, 0, 0};
  Tensor t = upload(rt, 0, values_of(0, 8), {8});
  EXPECT_THROW(g.groups[0]->all_reduce(ctx, t), Error);
}

// The stop check before each step (all_reduce_max) carries the same header: a rank that calls
// another collective there, or checks another number of values, is the one-line mismatch on every
// rank, not Gloo's hang or mixed-up buffers.
TEST(GlooGroup, TheStopCheckAgainstAnotherCollectiveIsTheOneLineMismatchOnEveryRank) {
  GlooRanks g(3, milliseconds(20000));
  const auto t0 = Clock::now();
  auto errors = on_threads(3, [&](int r) {
    if (r == 1) {  // rank 1 is a step ahead: its first gradient bucket
      Runtime& rt = *g.runtimes[1];
      OpContext ctx{rt, 1, 0};
      Tensor t = upload(rt, 1, values_of(1, 8), {8});
      g.groups[1]->all_reduce(ctx, t);
      return;
    }
    std::vector<double> stop{0.0};
    g.groups[static_cast<size_t>(r)]->all_reduce_max(stop);
  });
  EXPECT_LT(seconds_since(t0), 10.0) << "the ranks waited for the 20 s timeout";
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(errors[static_cast<size_t>(r)], HasSubstr("every rank must call the same collective")) << r;
    EXPECT_THAT(errors[static_cast<size_t>(r)], HasSubstr("all_reduce_max (the stop check before each step)")) << r;
    EXPECT_THAT(errors[static_cast<size_t>(r)], HasSubstr("another rank called")) << r;
    EXPECT_EQ(errors[static_cast<size_t>(r)].find('\n'), std::string::npos) << r;
  }
  // Another number of values: the same line, naming the lengths.
  GlooRanks h(2, milliseconds(20000));
  errors = on_threads(2, [&](int r) {
    std::vector<double> values(static_cast<size_t>(r + 1), 0.0);
    h.groups[static_cast<size_t>(r)]->all_reduce_max(values);
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_THAT(errors[static_cast<size_t>(r)], HasSubstr("ranks passed between 1 and 2 values")) << r;
}

TEST(GlooGroup, ARankThatAbortsEndsTheOthersWaitAtOnce) {
  GlooRanks g(3, milliseconds(30000));
  const auto t0 = Clock::now();
  const auto errors = on_threads(3, [&](int r) {
    if (r == 1) {
      std::this_thread::sleep_for(milliseconds(300));  // the others are waiting in the all_reduce
      g.groups[1]->abort("rank 1 failed");
      return;
    }
    Runtime& rt = *g.runtimes[static_cast<size_t>(r)];
    OpContext ctx{rt, r, 0};
    Tensor t = upload(rt, r, values_of(r, 64), {64});
    g.groups[static_cast<size_t>(r)]->all_reduce(ctx, t);
  });
  EXPECT_LT(seconds_since(t0), 15.0) << "the others waited for the 30 s timeout";
  EXPECT_EQ(errors[1], "");
  for (int r : {0, 2}) EXPECT_THAT(errors[static_cast<size_t>(r)], HasSubstr("ProcessGroup (gloo): rank " + std::to_string(r))) << r;
}

TEST(GlooGroup, ARankThatNeverComesIsATimeoutNotAHang) {
  GlooRanks g(2, milliseconds(1000));
  const auto t0 = Clock::now();
  const auto errors = on_threads(2, [&](int r) {
    if (r == 1) return;  // never calls the collective
    Runtime& rt = *g.runtimes[0];
    OpContext ctx{rt, 0, 0};
    Tensor t = upload(rt, 0, values_of(0, 64), {64});
    g.groups[0]->all_reduce(ctx, t);
  });
  EXPECT_LT(seconds_since(t0), 10.0);
  EXPECT_THAT(errors[0], HasSubstr("ProcessGroup (gloo): rank 0"));
  EXPECT_THAT(errors[0], HasSubstr("1000 ms"));
}

TEST(GlooGroup, OnTheSimulatorTheClockWaitsForTheLastRankThenRunsTheRing) {
  constexpr int kWorld = 4, kN = 1 << 18;  // 1 MiB
  GlooRanks g(kWorld, milliseconds(20000), /*modelled=*/true);
  std::vector<double> ready(kWorld), end(kWorld), seconds(kWorld);
  const auto errors = on_threads(kWorld, [&](int r) {
    Runtime& rt = *g.runtimes[static_cast<size_t>(r)];
    OpContext ctx{rt, r, 0};
    Tensor t = upload(rt, r, values_of(r, kN), {kN});
    if (r == 2) rt.backend().model_collective(r, 0, "straggler", 0.0, 5e-3, 0);
    ready[static_cast<size_t>(r)] = rt.backend().device_time(r);
    auto work = g.groups[static_cast<size_t>(r)]->all_reduce_async(ctx, t);
    seconds[static_cast<size_t>(r)] = work->modelled_seconds();
    work->wait(ctx);
    end[static_cast<size_t>(r)] = rt.backend().device_time(r);
  });
  for (const std::string& e : errors) ASSERT_EQ(e, "");
  const double ring = model_ring_all_reduce_seconds(g.topology, {0, 1, 2, 3}, 4.0 * kN);
  ASSERT_GT(ring, 0);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_DOUBLE_EQ(seconds[static_cast<size_t>(r)], ring) << r;
    EXPECT_DOUBLE_EQ(end[static_cast<size_t>(r)], ready[2] + ring) << "rank " << r << " waits for the straggler";
  }
}

TEST(GlooGroup, BetweenNodesTheNetworkRingOrTreeIsModelled) {
  // 100 Gb/s and 5 us per hop: 8 ranks all-reducing 100 MB move 2 * 7/8 of it around the ring.
  EXPECT_DOUBLE_EQ(model_network_all_reduce_seconds(8, 100e6), 2.0 * 7.0 / 8.0 * 100e6 / 12.5e9 + 14 * 5e-6);
  EXPECT_STREQ(model_network_all_reduce(8, 100e6).algorithm, "ring");
  // Small messages over many nodes: the tree's 2 log2(64) = 12 hops beat the ring's 126.
  EXPECT_STREQ(model_network_all_reduce(64, 4096).algorithm, "tree");
  EXPECT_DOUBLE_EQ(model_network_all_reduce(64, 4096).seconds, 2.0 * 4096 / 12.5e9 + 12 * 5e-6);
  EXPECT_DOUBLE_EQ(model_network_broadcast_seconds(4, 1e6), 1e6 / 12.5e9 + 3 * 5e-6);
  EXPECT_EQ(model_network_all_reduce_seconds(1, 1e6), 0.0);
}

}  // namespace
}  // namespace furnace
