// The sample order a resumed run restores across world sizes and modes (train/ddp_resume.h).
#include "train/ddp_resume.h"

#include <zlib.h>

#include "furnace/distributed_sampler.h"  // defines: DistributedSampler
#include "furnace/error.h"
#include "furnace/scenario_options.h"  // defines: rank_loader_options

namespace furnace {
namespace {

const char* py_bool(bool b) { return b ? "True" : "False"; }

std::string ranks_text(int world) { return std::to_string(world) + (world == 1 ? " rank" : " ranks"); }

// "a single-device run", "a DataParallel run", "2 DDP ranks"
std::string saver_text(const Checkpoint& c) {
  if (c.ddp) return std::to_string(c.ddp->world) + " DDP ranks";
  return c.saved_by == "DataParallel" ? "a DataParallel run" : "a single-device run";
}

}  // namespace

uint32_t indices_checksum(const std::vector<int64_t>& order) {
  std::vector<uint8_t> bytes;
  bytes.reserve(order.size() * 8);
  for (int64_t i : order)
    for (int b = 0; b < 8; ++b) bytes.push_back(static_cast<uint8_t>(static_cast<uint64_t>(i) >> (8 * b)));
  return static_cast<uint32_t>(::crc32(::crc32(0L, Z_NULL, 0), bytes.data(), static_cast<uInt>(bytes.size())));
}

DdpCheckpointInfo ddp_checkpoint_info(const Scenario& sc, int64_t dataset_size, int world) {
  const LoaderOptions lo = rank_loader_options(sc, 0, world);
  DdpCheckpointInfo d;
  d.world = world;
  d.rank_batch = lo.batch_size;
  d.shuffle = lo.sampler->shuffle;
  d.seed = lo.sampler->seed;
  d.drop_last = lo.sampler->drop_last;
  d.set_epoch = lo.sampler_set_epoch;
  d.padded_size = DistributedSampler(dataset_size, *lo.sampler).total_size();
  return d;
}

uint32_t sampler_order_checksum(const Scenario& sc, int64_t dataset_size, int64_t epoch) {
  const LoaderOptions lo = rank_loader_options(sc, 0, 1);  // one replica: the whole order, unpadded
  DistributedSampler sampler(dataset_size, *lo.sampler);
  if (lo.sampler_set_epoch) sampler.set_epoch(epoch);
  return indices_checksum(sampler.indices());
}

ResumeOrder check_resume_order(const Checkpoint& c, const std::optional<DdpCheckpointInfo>& now,
                               int64_t micro_per_epoch, int64_t steps_per_epoch, const std::string& path) {
  ResumeOrder out;
  const bool saved_ddp = c.saved_by == "DistributedDataParallel";
  FURNACE_CHECK(!saved_ddp || c.ddp)
      << "checkpoint " << path << " was saved by DDP ranks before checkpoints kept the sampler's settings "
      << "(no 'ddp' metadata): its ranks' sample order cannot be checked, so it cannot be resumed";
  const int64_t epoch = c.loader.epoch, k = c.loader.next_batch;
  const bool boundary = k == 0 || k == micro_per_epoch;
  const std::string where = "inside epoch " + std::to_string(epoch + 1) + " (at batch " + std::to_string(k) +
                            " of " + std::to_string(micro_per_epoch) + ")";
  const std::string from_boundary = "or from a checkpoint saved at an epoch boundary (a step that is a multiple of " +
                                    std::to_string(steps_per_epoch) + ")";
  const int saved_world = c.ddp ? c.ddp->world : 1;
  const int world = now ? now->world : 1;
  out.samples_per_rank_num = saved_world;  // rank 0's samples * saved world = all ranks' samples
  out.samples_per_rank_den = world;

  if (saved_ddp != now.has_value()) {  // rule 4: one process <-> DDP
    const std::string own = saved_ddp ? "--parallel ddp --nproc " + std::to_string(saved_world)
                                      : "--parallel " + c.scenario.parallel;
    FURNACE_CHECK(boundary)
        << "checkpoint " << path << " was saved by " << saver_text(c) << " " << where << ": "
        << (saved_ddp ? "DistributedSampler's order is not the DataLoader's own shuffle"
                      : "the DataLoader's own shuffle is not the order DistributedSampler gives --parallel ddp")
        << ", so the rest of this epoch would draw other samples (some twice, some never); resume with " << own
        << " (its own mode), " << from_boundary;
    out.compare_order = false;
    out.notes.push_back(std::string("resumed at an epoch boundary in another mode (saved by ") + saver_text(c) +
                        ", continued " + (now ? "by " + ranks_text(world) + " of DDP" : std::string("in one process")) +
                        "): model, optimizer, GradScaler, step and tallies restored; the next epoch draws " +
                        (now ? "DistributedSampler's order" : "the DataLoader's own shuffle") +
                        ", not the saved run's");
    return out;
  }
  if (!now) return out;  // one process on both sides: the DataLoader's checks

  const DdpCheckpointInfo& s = *c.ddp;
  const DdpCheckpointInfo& n = *now;
  FURNACE_CHECK(s.shuffle == n.shuffle && s.seed == n.seed && s.drop_last == n.drop_last && s.set_epoch == n.set_epoch)
      << "checkpoint " << path << ": its DistributedSampler(shuffle=" << py_bool(s.shuffle) << ", seed=" << s.seed
      << ", drop_last=" << py_bool(s.drop_last) << ") with set_epoch " << (s.set_epoch ? "called" : "never called")
      << " is not this run's (shuffle=" << py_bool(n.shuffle) << ", seed=" << n.seed << ", drop_last=" << n.drop_last
      << ", set_epoch " << (n.set_epoch ? "called" : "never called") << "): the ranks would draw other samples";
  FURNACE_CHECK(s.rank_batch * s.world == n.rank_batch * n.world)
      << "checkpoint " << path << ": its global batch is " << s.rank_batch * s.world << " (" << s.rank_batch
      << " on each of " << s.world << " ranks), this run's " << n.rank_batch * n.world
      << ": --resume continues the saved run with its batch";
  if (s.world == n.world) return out;  // rule 1
  // Rules 2 and 3.
  FURNACE_CHECK(boundary || s.padded_size == n.padded_size)
      << "checkpoint " << path << " was saved by " << ranks_text(s.world) << " " << where
      << ": DistributedSampler pads each epoch's order to ceil(N / world) * world samples, " << s.padded_size
      << " for " << ranks_text(s.world) << " and " << n.padded_size << " for " << n.world
      << ", so this epoch's last step would draw other samples than the saved run's; resume on " << ranks_text(s.world)
      << " (--nproc " << s.world << ", or a launcher's --nproc-per-node " << s.world << "), " << from_boundary;
  out.notes.push_back("resumed on " + ranks_text(n.world) + " from a checkpoint of " + ranks_text(s.world) +
                      " (global batch " + std::to_string(n.rank_batch * n.world) + "): every remaining step draws "
                      "the same samples as the saved run would, " + std::to_string(n.rank_batch) +
                      " per rank instead of " + std::to_string(s.rank_batch) +
                      "; the averaged gradients are equal up to fp32 rounding, not bit for bit, and the loss "
                      "shown is rank 0's share");
  return out;
}

}  // namespace furnace
