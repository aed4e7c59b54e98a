// The end of a launched `--parallel ddp` job through the rendezvous store (process_rank.h): each
// rank leaves its report and rank 0 gathers them; a rank that fails before its report (its
// run's finish throws) or whose process ends without one (its store connection closes) makes
// rank 0 fail at once with one line naming that rank and why, not wait for --dist-timeout.
// Each rank is a store client on a thread of its own, as a process would have; every socket is
// on 127.0.0.1. This executable carries the ctest label "threads" (tsan preset).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "furnace/error.h"
#include "furnace/tcp_store.h"
#include "support/loopback.h"    // defines: kLoopback, seconds_since, Clock
#include "train/process_rank.h"  // defines: expect_rank_report, leave_rank_report, gather_rank_reports

namespace furnace {
namespace {

using ::testing::HasSubstr;
using test_support::Clock;
using test_support::kLoopback;
using test_support::seconds_since;
using std::chrono::milliseconds;

// Every store's timeout (--dist-timeout): rank 0 must fail well before it.
constexpr milliseconds kTimeout(20000);

DdpRankSummary summary_of(int rank) {
  DdpRankSummary s;
  s.train_samples = 1000 + rank;
  s.modelled_s = 0.5 * (rank + 1);
  s.report.rank = rank;
  s.report.device = rank;
  s.report.memory.device = rank;
  s.report.memory.name = "NVIDIA GeForce RTX 3090";
  return s;
}

// Rank 0 (the host) and rank 1's client, each having registered its report.
struct TwoRanks {
  TcpStore rank0{kLoopback, 0, /*host=*/true, kTimeout};
  std::unique_ptr<TcpStore> rank1 = std::make_unique<TcpStore>(kLoopback, rank0.port(), /*host=*/false, kTimeout);
  TwoRanks() {
    expect_rank_report(rank0, 0);
    expect_rank_report(*rank1, 1);
  }
};

// What rank 0's gather throws, "" when it returns, and how long it took.
std::string gather_error(TcpStore& store, double& seconds) {
  const auto t0 = Clock::now();
  std::string error;
  try {
    std::vector<int> nodes;
    gather_rank_reports(store, 2, nodes);
  } catch (const Error& e) {
    error = e.message();
  }
  seconds = seconds_since(t0);
  return error;
}

TEST(RankReports, RankZeroGathersEveryRanksReportAndNode) {
  TwoRanks job;
  leave_rank_report(*job.rank1, 1, /*node=*/1, summary_of(1));
  leave_rank_report(job.rank0, 0, /*node=*/0, summary_of(0));
  std::vector<int> nodes;
  const std::vector<DdpRankSummary> got = gather_rank_reports(job.rank0, 2, nodes);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(got[1].train_samples, 1001);
  EXPECT_EQ(got[1].modelled_s, 1.0);
  EXPECT_EQ(got[1].report.memory.name, "NVIDIA GeForce RTX 3090");
}

TEST(RankReports, ARankThatFailsBeforeItsReportEndsRankZerosWaitAtOnceNamingIt) {
  TwoRanks job;
  leave_rank_report(job.rank0, 0, 0, summary_of(0));
  std::thread rank1([&] {
    std::this_thread::sleep_for(milliseconds(300));  // rank 0 is waiting for the report
    leave_rank_failure(*job.rank1, 1, "cannot write /full/disk/trace.json: No space left on device");
  });
  double took = 0;
  const std::string error = gather_error(job.rank0, took);
  rank1.join();
  EXPECT_EQ(error, "rank 1 failed before sending its report: cannot write /full/disk/trace.json: No space left "
                   "on device");
  EXPECT_LT(took, 5.0) << "rank 0 waited for the 20 s --dist-timeout";
}

TEST(RankReports, ARankWhoseProcessEndsWithoutAReportEndsRankZerosWaitAtOnce) {
  TwoRanks job;
  leave_rank_report(job.rank0, 0, 0, summary_of(0));
  std::thread rank1([&] {
    std::this_thread::sleep_for(milliseconds(300));
    job.rank1.reset();  // killed, or its store gone too: its connection closes
  });
  double took = 0;
  const std::string error = gather_error(job.rank0, took);
  rank1.join();
  EXPECT_THAT(error, HasSubstr("rank 1 failed before sending its report: its process ended"));
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_LT(took, 5.0) << "rank 0 waited for the 20 s --dist-timeout";
}

TEST(RankReports, AReportLeftBeforeTheProcessEndsIsKept) {
  TwoRanks job;
  leave_rank_report(job.rank0, 0, 0, summary_of(0));
  leave_rank_report(*job.rank1, 1, 0, summary_of(1));
  job.rank1.reset();  // rank 1 is done and exits
  std::vector<int> nodes;
  EXPECT_EQ(gather_rank_reports(job.rank0, 2, nodes).at(1).train_samples, 1001);
}

}  // namespace
}  // namespace furnace
