// train/process_rank: `--parallel ddp` in a process a launcher started (`furnace launch`,
// torchrun, mpirun, srun): this process is one rank, RANK of WORLD_SIZE, on cuda:LOCAL_RANK of
// its node's simulated machine, or of the real GPUs with --backend cuda. Rank 0 hosts the
// rendezvous store at MASTER_ADDR:MASTER_PORT; every rank joins the Gloo process group through
// it. On the simulator DDP's buckets are all-reduced by Gloo between the processes; on GPUs by
// NCCL (furnace/nccl_group.h, its unique id through the same store), Gloo then carrying only the
// job's control. Rank 0 logs, evaluates and writes checkpoints; every rank reports its
// time and memory to rank 0 at the end.
//
// A rank that fails aborts the group: the others' collectives fail at once and each rank exits
// with its own line ("rank 1: ..."); one that fails (or dies) before its end-of-job report leaves
// why under the report's key, so rank 0 names it at once instead of waiting for --dist-timeout.
// A stop signal (Ctrl-C, SIGTERM from the launcher) is agreed on by every rank before each step
// (the largest signal any rank got), so all stop after the same step and rank 0's checkpoint is
// consistent.
// Not here: the ranks as threads of one process (ddp_ranks.h), a rank's loop (training_run.cpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "furnace/gloo_group.h"   // defines: GlooGroup
#include "furnace/launch_env.h"   // defines: WorkerEnv
#include "furnace/nccl_group.h"   // defines: make_nccl_group
#include "furnace/sim_machine.h"  // defines: SimMachine
#include "furnace/tcp_store.h"    // defines: TcpStore
#include "train/ddp_job.h"        // defines: DdpJob
#include "train/ddp_ranks.h"      // defines: RankSetup

namespace furnace {

// The launcher's contract in a scenario's environment (Scenario::env, which `furnace train` fills
// from its own), or nullopt when no launcher started the process. Throws one line for a broken one.
std::optional<WorkerEnv> launched_worker(const Scenario& sc);

// The end of a launched job, through the store: each rank leaves its report under its key, or
// why it has none; rank 0 reads them all. A rank whose process ends with neither leaves the note
// expect_rank_report registered (the store sets it when the connection closes), so rank 0 fails
// at once, naming the rank, instead of waiting for --dist-timeout.
void expect_rank_report(TcpStore& store, int rank);
void leave_rank_report(TcpStore& store, int rank, int node, const DdpRankSummary& summary);
// Best effort: a store that is gone too leaves expect_rank_report's note.
void leave_rank_failure(TcpStore& store, int rank, const std::string& why) noexcept;
// Every rank's report in rank order, and its node (GROUP_RANK); throws one line
// "rank R failed before sending its report: why" for the first rank that left a failure.
std::vector<DdpRankSummary> gather_rank_reports(TcpStore& store, int world, std::vector<int>& nodes);

class ProcessRank final : public DdpJob {
 public:
  // Joins the job (within sc.dist_timeout_s) and builds this rank's TrainingRun. Throws one line
  // starting "rank R: ".
  ProcessRank(const Scenario& sc, TraceBus& trace, const CheckpointOptions& checkpoints, WorkerEnv worker);
  ~ProcessRank() override;

  std::optional<Progress> step() override;
  bool done() const override;
  int64_t total_steps() const override;
  void save() override;
  TrainResult finish() override;

 private:
  // Runs fn; an error aborts the group (the other ranks stop waiting at once) and is rethrown as
  // one line naming this rank.
  template <class Fn>
  auto as_rank(Fn fn) -> decltype(fn());

  WorkerEnv worker_;
  std::unique_ptr<SimMachine> machine_;
  std::unique_ptr<TcpStore> store_;
  std::unique_ptr<GlooGroup> control_;     // Gloo: the stop signal; the gradients too on the simulator
  std::unique_ptr<ProcessGroup> nccl_;     // --backend cuda: the gradients (destroyed before control_)
  RankSetup setup_;
  std::unique_ptr<TrainingRun> run_;
  std::function<int()> stop_requested_;
  int stop_signal_ = 0;  // agreed by every rank
  std::string broken_;
  double t0_ = 0;
};

}  // namespace furnace
