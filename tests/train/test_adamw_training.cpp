// AdamW in the training loop: DataParallel and gradient accumulation give the updates of one device
// and one large batch (the properties DESIGN.md states for SGD), and fp16's skipped steps never let
// an inf reach the weights or AdamW's moments. PyTorch parity of the update itself:
// tests/reference/test_reference_adamw.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "furnace/train.h"

namespace furnace {
namespace {

Scenario adamw_scenario() {
  Scenario sc;
  sc.data_dir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  sc.topology = "workstation-4x3090";
  sc.optimizer = "adamw";
  sc.lr = 1e-3f;
  sc.lr_schedule = "constant";
  sc.batch = 256;
  sc.epochs = 1;
  sc.max_steps = 6;
  sc.evaluate = false;
  return sc;
}

std::vector<float> losses_of(const Scenario& sc, TrainResult* result = nullptr) {
  TraceBus bus;
  std::vector<float> losses;
  const TrainResult r = train(sc, bus, [&](const Progress& p) { losses.push_back(p.loss); });
  if (result) *result = r;
  return losses;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, double rel, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], rel * std::fabs(b[i])) << what << ", step " << i + 1;
}

TEST(AdamWTraining, DataParallelEqualsOneDevice) {
  const std::vector<float> one = losses_of(adamw_scenario());
  Scenario dp = adamw_scenario();
  dp.parallel = "dp";
  expect_close(losses_of(dp), one, 1e-4, "DataParallel on 4 GPUs against one");
}

TEST(AdamWTraining, AccumulatingFourMicroBatchesEqualsOneBatchOfFourTimesTheSize) {
  const std::vector<float> big = losses_of(adamw_scenario());
  Scenario accum = adamw_scenario();
  accum.batch = 64;
  accum.accum = 4;
  expect_close(losses_of(accum), big, 1e-4, "4 x 64 accumulated against 256");
}

TEST(AdamWTraining, Fp16SkippedStepsKeepTheWeightsFinite) {
  Scenario sc = adamw_scenario();
  sc.amp = "fp16";
  sc.scaler.init_scale = 16777216.0;  // 2^24: the first steps overflow and are skipped
  sc.max_steps = 12;
  sc.clip_grad_norm = 1.0f;     // unscale_ before clipping, then step: an inf never reaches AdamW
  TrainResult r;
  const std::vector<float> losses = losses_of(sc, &r);
  EXPECT_GT(r.skipped_steps, 0);
  EXPECT_LT(r.skipped_steps, r.steps) << "the scale must come down and AdamW step";
  for (float l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(losses.back(), losses.front());
}

}  // namespace
}  // namespace furnace
