// The host's DataLoader on the modelled clock (train/loading_timeline.h): with no workers the loop
// loads each batch itself; with workers, prefetch_factor * W batches start with the epoch and each
// worker loads its own batches one after another, so the GPU waits only when it outruns them.
#include <gtest/gtest.h>

#include "furnace/loading_cost.h"
#include "train/loading_timeline.h"

namespace furnace {
namespace {

// 1 ms per sample: a batch of 10 takes 10 ms of one worker.
LoadingCost millisecond_per_sample() { return {"test", "test", 1e-3, 0.0}; }

TEST(LoadingTimeline, WithoutWorkersTheLoopLoadsEachBatchItself) {
  LoadingTimeline t(millisecond_per_sample(), 0, 2);
  t.start_epoch(0.0, 0);
  EXPECT_DOUBLE_EQ(t.ready(0, 10, 0.0), 0.010);
  EXPECT_DOUBLE_EQ(t.ready(1, 10, 0.015), 0.025);  // asked after the GPU's step: loaded then
  EXPECT_DOUBLE_EQ(t.ready(2, 4, 0.030), 0.034);   // a short last batch loads faster
}

TEST(LoadingTimeline, WorkersLoadAheadAndTheGpuWaitsOnlyWhenItOutrunsThem) {
  // 2 workers, prefetch_factor 2: batches 0..3 handed out at 0; worker 0 loads 0 then 2.
  LoadingTimeline t(millisecond_per_sample(), 2, 2);
  t.start_epoch(0.0, 0);
  EXPECT_DOUBLE_EQ(t.ready(0, 10, 0.0), 0.010);    // the epoch's first batch: everyone waits
  EXPECT_DOUBLE_EQ(t.ready(1, 10, 0.011), 0.011);  // worker 1 finished it at 0.010
  EXPECT_DOUBLE_EQ(t.ready(2, 10, 0.012), 0.020);  // worker 0's second batch
  EXPECT_DOUBLE_EQ(t.ready(3, 10, 0.030), 0.030);  // a slow GPU: the batch was waiting for it
  // Batch 4 was handed out when batch 0 was taken (0.010); worker 0 was free at 0.020.
  EXPECT_DOUBLE_EQ(t.ready(4, 10, 0.031), 0.031);
  // A new epoch starts the workers again: its first batch waits.
  t.start_epoch(1.0, 0);
  EXPECT_DOUBLE_EQ(t.ready(0, 10, 1.0), 1.010);
}

TEST(LoadingCosts, NameTheMeasuredDatasets) {
  ASSERT_TRUE(loading_cost("tensors"));
  ASSERT_TRUE(loading_cost("torchvision"));
  EXPECT_FALSE(loading_cost("off"));
  EXPECT_GT(loading_cost("torchvision")->fetch_s, loading_cost("tensors")->fetch_s);
  EXPECT_DOUBLE_EQ(batch_loading_seconds(*loading_cost("tensors"), 64), 64 * 7.5e-6);
}

}  // namespace
}  // namespace furnace
