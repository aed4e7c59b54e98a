// train/ddp_resume: which sample order a resumed run can restore when the checkpoint's run and
// this one share out the samples differently: another DDP world size, or DDP against one
// process's DataLoader (one device or DataParallel). The rule (README, "Resuming a DDP run"):
//
// A checkpoint holds one position (epoch e, batch k of the epoch) for every rank: they step
// together. DistributedSampler's order for epoch e is P = torch.randperm(N) seeded with seed + e
// (seed when set_epoch is never called), whatever the world size W; padded by its own head to
// T(W) = ceil(N / W) * W samples; rank r takes P[r], P[r + W], ... With a global batch B (B / W
// per rank), optimizer micro-step k of the epoch draws exactly positions [k*B, (k+1)*B) of the
// padded order on any W that divides B, and every such W gives ceil(N / B) steps per epoch. So:
//   1. the same W: the same samples on the same ranks, bit for bit as the uninterrupted run;
//   2. another W' (B % W' == 0) at an epoch boundary (k = 0 or the epoch's end), or inside an
//      epoch when T(W') == T(W): every remaining step draws the same B samples as the saved run
//      would, split over other ranks. The averaged gradient is the same mean, summed in another
//      order: equal up to fp32 rounding (as an uninterrupted run on W' ranks is), not bit for bit;
//      the printed loss is rank 0's share;
//   3. another W' inside an epoch with T(W') != T(W): the epoch's last step would draw other
//      (padding) samples: refused, one line (keep --nproc W, or resume from an epoch boundary);
//   4. one process <-> DDP: the DataLoader's own shuffle and DistributedSampler's order differ, so
//      only at an epoch boundary (the next epoch draws the new mode's order); inside an epoch
//      refused, one line.
// The sampler's settings (shuffle, seed, drop_last, set_epoch) must equal the saved ones.
// Not here: loading the state (training_state.cpp), the loop's position (training_run.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "furnace/checkpoint.h"  // defines: Checkpoint, DdpCheckpointInfo
#include "furnace/train.h"       // defines: Scenario

namespace furnace {

// How a DDP run of `sc` on `world` ranks over `dataset_size` samples shares them out (what its
// checkpoint records).
DdpCheckpointInfo ddp_checkpoint_info(const Scenario& sc, int64_t dataset_size, int world);

// CRC32 of sample indices as int64 little-endian (a checkpoint's order_crc).
uint32_t indices_checksum(const std::vector<int64_t>& order);
// CRC32 of a DDP run's epoch order before padding and striding (the same on every world size).
uint32_t sampler_order_checksum(const Scenario& sc, int64_t dataset_size, int64_t epoch);

struct ResumeOrder {
  bool compare_order = true;       // the checkpoint's order_crc is this run's kind of order
  int64_t samples_per_rank_num = 1, samples_per_rank_den = 1;  // rescales tallies.train_samples
  std::vector<std::string> notes;  // what was restored, when the sharing changed
};

// Checks that this run (`now`: its DDP sharing, or nullopt for one process) can continue the
// checkpoint's sample order from its position (rules above); throws one line naming the mismatch
// and what to do. `micro_per_epoch` / `steps_per_epoch`: this run's batches and optimizer steps
// per epoch.
ResumeOrder check_resume_order(const Checkpoint& c, const std::optional<DdpCheckpointInfo>& now,
                               int64_t micro_per_epoch, int64_t steps_per_epoch, const std::string& path);

}  // namespace furnace
