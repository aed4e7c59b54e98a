// train/loading_timeline: when each batch is ready on the host, on the modelled clock. The
// DataLoader's work (furnace/loading_cost.h: fetch and collate, per sample) runs in the main
// process with num_workers=0, between two steps; with W workers, batch i goes to worker i % W,
// prefetch_factor * W batches are handed out when the epoch's iterator starts and one more each
// time the loop takes a batch, and each worker loads its batches one after another. The loop
// itself waits for the GPU once per micro-step (loss.item()), so the host's "now" is the GPU's
// time when it asks for the next batch. Not modelled: starting the worker processes at each epoch,
// the pin_memory thread and the transfer between processes.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "furnace/loading_cost.h"

namespace furnace {

class LoadingTimeline {
 public:
  // prefetch_factor: the DataLoader's (2 when it was None); unused without workers.
  LoadingTimeline(LoadingCost cost, int workers, int prefetch_factor);
  // A new iterator over the epoch at host time `now`, its first batch `first_batch` (a resumed run).
  void start_epoch(double now, int64_t first_batch);
  // The loop asks for the epoch's batch `index` (in order) of `samples` at host time `now`:
  // returns when it is in the loop's hands (>= now).
  double ready(int64_t index, int64_t samples, double now);

 private:
  LoadingCost cost_;
  int workers_, in_flight_;
  std::vector<double> worker_free_;  // when each worker finishes its current batch
  std::deque<double> handed_out_;    // when the next batches were handed to a worker, in order
};

}  // namespace furnace
