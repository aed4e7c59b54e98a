// train/ddp_ranks: `--parallel ddp` as torchrun --nproc-per-node N runs a training script: N
// processes of one simulated machine (SimMachine: each its own Runtime, CUDA context and caching
// allocator), each with RANK, LOCAL_RANK, WORLD_SIZE in its environment, each a TrainingRun of its
// own on cuda:LOCAL_RANK, joined by one ProcessGroup. The ranks live on threads that step together:
// step() runs one optimizer step on every rank at once (their collectives meet inside it) and
// hands back rank 0's progress, as the script's `if rank == 0: print(...)` would.
// Not here: DDP itself (furnace/ddp.h), a rank's loop (training_run.cpp).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "furnace/op_table.h"       // defines: CpuGemmThreadsScope
#include "furnace/process_group.h"  // defines: ProcessGroup
#include "furnace/sim_machine.h"    // defines: SimMachine, Process
#include "furnace/train.h"
#include "parallel/worker_pool.h"   // defines: parallel::WorkerPool
#include "train/ddp_job.h"          // defines: DdpJob
#include "train/training_data.h"    // defines: TrainingData

namespace furnace {

// What a rank's TrainingRun takes from the launcher.
struct RankSetup {
  int rank = 0, world = 1;
  SimMachine* machine = nullptr;   // the simulator's machine; null: the real cuda backend (make_backend)
  Process* process = nullptr;      // its process on `machine` (RANK, LOCAL_RANK, ... set)
  ProcessGroup* group = nullptr;   // its handle on the group
  std::shared_ptr<const TrainingData> data;
};

// The number of ranks `sc` asks for (--nproc, or one per GPU its environment makes visible on
// `topology`), checked: at least one GPU each, a global batch they can share evenly. Throws one line.
int ddp_world_size(const Scenario& sc, const Topology& topology);
// The global batch splits evenly over `world` ranks, at least a row each; throws one line.
void check_ddp_batch(const Scenario& sc, int world);
// The backend the ranks train on, "sim" or "cuda", or one line saying why not. In threads of this
// process (`launched` false) only the simulator (the thread group's collectives); under a launcher
// (one process per rank) also cuda, whose gradients go through NCCL: asked by name, or auto with a
// GPU present, where the cuda backend was built with NCCL (auto falls back to sim without NCCL).
std::string check_ddp_backend(const Scenario& sc, bool launched = false);
// Rank `rank`'s share of the job's checkpoint options: rank 0 alone saves (and reports notes);
// every rank stops at the same step and resumes from the same checkpoint (any launcher of ranks).
// Throws check_host_memory's line when this process cannot hold the simulated GPUs of
// `local_ranks` (cuda:r each) with their share of the global batch over `world` ranks.
void check_ranks_host_memory(const Scenario& sc, const Topology& topology, const TrainingData& data,
                             const std::vector<int>& local_ranks, int world, bool keeps_state, int threads);
CheckpointOptions rank_checkpoint_options(const CheckpointOptions& job, int rank);
// --device is not set: each rank's LOCAL_RANK picks its device; throws one line.
void check_ddp_device(const Scenario& sc);

class DdpRanks final : public DdpJob {
 public:
  // Starts the ranks and builds each one's TrainingRun (DDP's constructor broadcasts rank 0's
  // parameters: they construct together). Throws the first rank's error ("rank 2: ...").
  DdpRanks(const Scenario& sc, TraceBus& trace, const CheckpointOptions& checkpoints);
  ~DdpRanks();
  DdpRanks(const DdpRanks&) = delete;
  DdpRanks& operator=(const DdpRanks&) = delete;

  std::optional<Progress> step() override;
  bool done() const override;
  int64_t total_steps() const override;
  void save() override;
  TrainResult finish() override;

 private:
  // Runs fn(rank) on every rank's thread at once; a rank that throws aborts the group (the others
  // leave their collectives at once); then rethrows the error that started it, naming the rank.
  void on_every_rank(const std::function<void(int rank)>& fn);

  Scenario sc_;
  TraceBus& trace_;
  int world_ = 1;
  std::unique_ptr<SimMachine> machine_;
  std::vector<std::unique_ptr<ProcessGroup>> group_;
  std::vector<std::unique_ptr<TraceBus>> buses_;  // each rank's, forwarding to trace_
  std::vector<RankSetup> setups_;                 // each rank's TrainingRun keeps a pointer
  std::vector<std::unique_ptr<TrainingRun>> runs_;
  std::unique_ptr<CpuGemmThreadsScope> one_blas_thread_;  // N ranks' GEMMs share the cores
  parallel::WorkerPool pool_;
  int stop_signal_ = 0;  // the user's stop request, latched before a step so every rank sees it
  std::function<int()> stop_requested_;
  std::string broken_;   // a rank failed: the run cannot go on
  double t0_ = 0;
};

}  // namespace furnace
