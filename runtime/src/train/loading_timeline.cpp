// The host's DataLoader on the modelled clock (train/loading_timeline.h).
#include "train/loading_timeline.h"

#include <algorithm>

namespace furnace {

LoadingTimeline::LoadingTimeline(LoadingCost cost, int workers, int prefetch_factor)
    : cost_(std::move(cost)), workers_(workers), in_flight_(workers * std::max(prefetch_factor, 1)) {}

void LoadingTimeline::start_epoch(double now, int64_t /*first_batch*/) {
  // A fresh iterator: new workers, idle, and prefetch_factor * W batches handed out at once.
  worker_free_.assign(static_cast<size_t>(workers_), now);
  handed_out_.assign(static_cast<size_t>(in_flight_), now);
}

double LoadingTimeline::ready(int64_t index, int64_t samples, double now) {
  const double load = batch_loading_seconds(cost_, samples);
  if (workers_ == 0) return now + load;  // the main process loads it now, the GPU waiting
  // Batch `index` was handed to its worker at handed_out_.front(); the worker starts it when it has
  // finished the batches before it.
  double& free_at = worker_free_[static_cast<size_t>(index % workers_)];
  const double start = std::max(handed_out_.front(), free_at);
  handed_out_.pop_front();
  free_at = start + load;
  const double got = std::max(now, free_at);
  handed_out_.push_back(got);  // taking a batch hands out the next one
  return got;
}

}  // namespace furnace
