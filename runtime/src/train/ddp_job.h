// train/ddp_job: the ranks of a `--parallel ddp` run that this process drives, as TrainingRun
// steps them: every rank on threads of this process (DdpRanks: `furnace train` alone, as
// torchrun --nproc-per-node N on one simulated machine), or this process as one rank of a job a
// launcher started (ProcessRank: `furnace launch`, torchrun, mpirun, srun).
// Not here: one rank's training loop (training_run.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "furnace/train.h"

namespace furnace {

class DdpJob {
 public:
  virtual ~DdpJob() = default;
  // One optimizer step on every rank this process drives: rank 0's progress, with the samples of
  // every rank; nullopt once the run is done.
  virtual std::optional<Progress> step() = 0;
  virtual bool done() const = 0;
  virtual int64_t total_steps() const = 0;
  virtual void save() = 0;  // rank 0 writes the checkpoint
  // The run's result: rank 0's, with every rank's samples, time and memory (DdpReport::ranks).
  virtual TrainResult finish() = 0;
};

// What one rank's run contributes to the job's result besides rank 0's own.
struct DdpRankSummary {
  int64_t train_samples = 0;
  double modelled_s = 0, modelled_step_s = 0;
  DdpRankReport report;  // its DdpReport::ranks[0]
};

DdpRankSummary summarize_rank(const TrainResult& r);

// Rank 0's result with every rank's summary folded in: the samples summed, the slowest rank's
// modelled time, each rank's busy and idle time and the share of the all-reduces hidden behind
// backward; samples_per_s over `wall_s`. Each rank's GPU memory goes into `memory` where that
// GPU is on rank 0's node (same_node_as_rank0[r]): one machine's memory, as nvidia-smi there shows it.
TrainResult combine_ddp_ranks(TrainResult rank0, const std::vector<DdpRankSummary>& ranks,
                              const std::vector<bool>& same_node_as_rank0, double wall_s);

}  // namespace furnace
