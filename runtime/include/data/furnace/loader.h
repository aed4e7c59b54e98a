// furnace/loader.h: torch.utils.data.DataLoader for map-style datasets: seeded shuffle per epoch,
// batch_size, drop_last (len = N // B, else ceil(N / B)), num_workers threads producing batches in
// parallel with prefetch_factor batches in flight per worker (2 by default), batches delivered in
// order, pin_memory. An error in a worker surfaces in the caller naming the worker. Workers are
// threads here, not processes: what matters for the lessons (parallel loading, prefetching, order,
// errors) behaves the same.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "furnace/data.h"
#include "furnace/distributed_sampler.h"  // defines: DistributedSamplerOptions

namespace furnace {

// A map-style dataset. fetch() is called from worker threads and must be safe to call
// concurrently (reads only).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t features() const = 0;
  virtual void fetch(int64_t index, float* image, int32_t* label) const = 0;
};

// An ImageDataset in memory as a Dataset.
class ImageDatasetView : public Dataset {
 public:
  explicit ImageDatasetView(const ImageDataset& ds) : ds_(ds) {}
  int64_t size() const override { return ds_.n; }
  int64_t features() const override { return ds_.features(); }
  void fetch(int64_t index, float* image, int32_t* label) const override;

 private:
  const ImageDataset& ds_;
};

struct LoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  int num_workers = 0;
  int prefetch_factor = -1;  // -1 means None: 2 when num_workers > 0
  bool pin_memory = false;   // batches come in page-locked buffers: faster, asynchronous copies
  uint64_t seed = 0;
  // DataLoader(dataset, sampler=DistributedSampler(dataset, num_replicas, rank, shuffle, seed)):
  // the epoch's batches are this rank's share (furnace/distributed_sampler.h) instead of the
  // loader's own order, and `shuffle` above is unused (PyTorch forbids both). With
  // `sampler_set_epoch` false the loop never calls sampler.set_epoch(epoch): every epoch draws
  // epoch 0's order, the trap the DistributedSampler docs warn about.
  std::optional<DistributedSamplerOptions> sampler;
  bool sampler_set_epoch = true;
};

struct Batch {
  std::vector<float> images;    // (size, features)
  std::vector<int32_t> labels;  // (size)
  int64_t size = 0;
  int64_t features = 0;
  int64_t index = -1;           // position in the epoch
  std::vector<int64_t> sample_indices;  // which dataset items it holds
  bool pinned = false;
};

class DataLoader {
 public:
  // Throws furnace::Error with PyTorch's messages for a bad batch_size, num_workers or
  // prefetch_factor.
  DataLoader(const Dataset& dataset, LoaderOptions options);
  // The common case: an in-memory image dataset, no workers.
  DataLoader(const ImageDataset& dataset, int64_t batch_size, bool shuffle, bool drop_last,
             uint64_t seed);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_batches() const;  // len(loader)
  const LoaderOptions& options() const { return opt_; }
  // Starts epoch `epoch`: a fresh permutation from (seed, epoch) when shuffling; workers start
  // fetching right away. `first_batch` > 0 resumes inside the epoch (a checkpoint): the same
  // permutation, and next() continues with batch `first_batch` (at most num_batches()).
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch next() will yield: the loader's position in the epoch (a checkpoint saves it).
  int64_t position() const;
  // This epoch's sample indices in the order the batches deliver them (the shuffle's result).
  std::vector<int64_t> epoch_order() const;
  // The next batch in order; false at the end of the epoch. A worker's error is rethrown as
  // "Caught <what> in DataLoader worker process <id>".
  bool next(Batch& out);
  // Batches handed to workers and not yet returned by next() (at most prefetch_factor * workers).
  int64_t in_flight() const;

  struct Impl;

 private:
  std::unique_ptr<ImageDatasetView> owned_view_;
  LoaderOptions opt_;
  std::unique_ptr<Impl> impl_;
};

// Fills `out` with the samples `indices` of `dataset` (what one worker does for one batch).
void collate(const Dataset& dataset, const std::vector<int64_t>& indices, Batch& out);

}  // namespace furnace
