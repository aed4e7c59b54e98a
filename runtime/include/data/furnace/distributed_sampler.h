// furnace/distributed_sampler.h: torch.utils.data.distributed.DistributedSampler, which gives each
// of `num_replicas` ranks its own share of a dataset (shared/reference/semantics.md section 8):
// num_samples = ceil(N / world), or ceil((N - world) / world) with drop_last when N % world != 0;
// the epoch's order is torch.randperm(N) from a generator seeded with seed + epoch (or 0..N-1);
// padded to num_samples * world by repeating its own head (cut instead with drop_last); rank r
// takes every world-th index from r. set_epoch only stores the epoch: a loop that never calls it
// sees the same order every epoch.
#pragma once

#include <cstdint>
#include <vector>

namespace furnace {

// torch.randperm(n, generator=g) after g.manual_seed(seed), on the CPU: a Fisher-Yates shuffle
// drawing mt19937's 32-bit numbers (the low 32 bits of the seed, as at::mt19937 keeps them),
// index i swapped with i + draw % (n - i). Checked against PyTorch 1.13 (tests/data).
std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed);

struct DistributedSamplerOptions {
  int num_replicas = 1;  // the world size
  int rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // Throws furnace::Error with PyTorch's words for a rank outside [0, num_replicas - 1]
  // ("Invalid rank 4, rank should be in the interval [0, 3]"), and for num_replicas < 1 or N < 0.
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options);

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t num_samples() const { return num_samples_; }  // len(sampler)
  int64_t total_size() const { return num_samples_ * options_.num_replicas; }
  // iter(sampler): this rank's dataset indices for the current epoch, num_samples() of them.
  std::vector<int64_t> indices() const;

 private:
  int64_t n_;
  DistributedSamplerOptions options_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace furnace
