// furnace/loader.h: DataLoader over an in-memory image dataset: seeded shuffle per epoch,
// batches of batch_size, the last one smaller unless drop_last (torch.utils.data semantics:
// len = ceil(N / B), or N // B with drop_last). Workers and pin_memory come with the data-loader
// issue; this is the num_workers=0 loader, loading in the calling thread.
#pragma once

#include <cstdint>
#include <vector>

#include "furnace/data.h"

namespace furnace {

struct Batch {
  std::vector<float> images;    // (size, features)
  std::vector<int32_t> labels;  // (size)
  int64_t size = 0;
  int64_t features = 0;
};

class DataLoader {
 public:
  DataLoader(const ImageDataset& dataset, int64_t batch_size, bool shuffle, bool drop_last,
             uint64_t seed);
  int64_t num_batches() const;  // len(loader)
  // Starts epoch `epoch`: a fresh permutation from (seed, epoch) when shuffling.
  void start_epoch(int64_t epoch);
  // Fills `out` with the next batch; false at the end of the epoch.
  bool next(Batch& out);

 private:
  const ImageDataset& dataset_;
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  std::vector<int64_t> order_;
  int64_t position_ = 0;
};

}  // namespace furnace
