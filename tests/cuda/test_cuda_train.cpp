// Training on a real GPU: the same Scenario on `cuda` and on `sim` (the committed Fashion-MNIST
// slice, 2000 training and 500 test images) reaches the same accuracy, in fp32, fp16 with the
// GradScaler and bf16, with accumulation and with the pinned-memory loader; an fp16 overflow skips
// steps on the GPU as on the simulator; the trace is stamped with CUDA events; memory statistics
// come from the caching allocator over cudaMalloc. SKIPPED without a GPU.
//
// Bounds: the two backends add in different orders (cuBLAS vs OpenBLAS, fp32 either way), so the
// weights differ by rounding, which can flip a few of the 500 test predictions: test accuracies
// within 0.02 (10 images), final losses within 3% (fp32) or 6% (16-bit activations).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "cuda/cuda_test_support.h"
#include "furnace/train.h"

namespace furnace {
namespace {

Scenario slice_scenario(const std::string& backend) {
  Scenario sc;
  sc.backend = backend;
  sc.data_dir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  sc.epochs = 4;
  sc.batch = 128;
  sc.seed = 3;
  return sc;
}

TrainResult run(const Scenario& sc) {
  TraceBus bus;
  return train(sc, bus);
}

void expect_same_training(const TrainResult& cuda, const TrainResult& sim, double loss_rtol) {
  EXPECT_EQ(cuda.backend, "cuda");
  EXPECT_EQ(sim.backend, "sim");
  EXPECT_EQ(cuda.steps, sim.steps);
  EXPECT_NEAR(cuda.test_accuracy, sim.test_accuracy, 0.02);
  EXPECT_NEAR(cuda.final_loss, sim.final_loss, loss_rtol * std::fabs(sim.final_loss));
  EXPECT_GT(cuda.test_accuracy, 0.6);  // it learned (chance is 0.1)
  std::printf("[ cuda vs sim ] amp %s accum %d: accuracy %.4f vs %.4f, loss %.5f vs %.5f\n",
              cuda.amp.c_str(), cuda.accum, cuda.test_accuracy, sim.test_accuracy,
              cuda.final_loss, sim.final_loss);
}

class CudaTrain : public ::testing::Test {
 protected:
  void SetUp() override { FURNACE_REQUIRE_CUDA_DEVICES(1); }
};

TEST_F(CudaTrain, Fp32ReachesTheSimulatorsAccuracy) {
  expect_same_training(run(slice_scenario("cuda")), run(slice_scenario("sim")), 0.03);
}

TEST_F(CudaTrain, Bf16AutocastReachesTheSimulatorsAccuracy) {
  Scenario cuda = slice_scenario("cuda"), sim = slice_scenario("sim");
  cuda.amp = sim.amp = "bf16";
  expect_same_training(run(cuda), run(sim), 0.06);
}

TEST_F(CudaTrain, Fp16WithGradScalerReachesTheSimulatorsAccuracy) {
  Scenario cuda = slice_scenario("cuda"), sim = slice_scenario("sim");
  cuda.amp = sim.amp = "fp16";
  const TrainResult c = run(cuda), s = run(sim);
  expect_same_training(c, s, 0.06);
  EXPECT_EQ(c.final_loss_scale, s.final_loss_scale);
}

TEST_F(CudaTrain, Fp16OverflowSkipsStepsAsOnTheSimulator) {
  // init_scale 2^40: the scaled gradients overflow fp16 until the scale has halved enough.
  Scenario cuda = slice_scenario("cuda"), sim = slice_scenario("sim");
  cuda.amp = sim.amp = "fp16";
  cuda.scaler.init_scale = sim.scaler.init_scale = 1099511627776.0;
  const TrainResult c = run(cuda), s = run(sim);
  EXPECT_GE(c.skipped_steps, 10);
  EXPECT_NEAR(static_cast<double>(c.skipped_steps), static_cast<double>(s.skipped_steps), 1.0);
  EXPECT_TRUE(std::isfinite(c.final_loss));
}

TEST_F(CudaTrain, AccumulationReachesTheSimulatorsAccuracy) {
  Scenario cuda = slice_scenario("cuda"), sim = slice_scenario("sim");
  cuda.accum = sim.accum = 2;
  cuda.batch = sim.batch = 64;
  expect_same_training(run(cuda), run(sim), 0.03);
}

TEST_F(CudaTrain, PinnedLoaderWithWorkersGivesTheSameRunAsPageableCopies) {
  Scenario pageable = slice_scenario("cuda");
  Scenario pinned = pageable;
  pinned.pin_memory = true;
  pinned.workers = 2;
  const TrainResult a = run(pageable), b = run(pinned);
  // The same batches in the same order, the same kernels on the same GPU: the same numbers.
  EXPECT_EQ(a.final_loss, b.final_loss);
  EXPECT_EQ(a.test_accuracy, b.test_accuracy);
}

TEST_F(CudaTrain, TheTraceIsStampedWithCudaEvents) {
  Scenario sc = slice_scenario("cuda");
  sc.max_steps = 3;
  sc.evaluate = false;
  TraceBus bus;
  std::map<std::string, int> kernels;
  int copies = 0, phases = 0, allocs = 0;
  double min_start = 1e30;
  bool costed = false;
  const int id = bus.subscribe([&](const TraceEvent& e) {
    if (e.kind == EventKind::kernel) {
      ++kernels[e.name];
      EXPECT_GE(e.dur_s, 0.0) << e.name;
      min_start = std::min(min_start, e.start_s);
      if (std::string(e.name) == "linear_forward" && e.flops > 0) costed = true;
    }
    if (e.kind == EventKind::copy) ++copies;
    if (e.kind == EventKind::phase) ++phases;
    if (e.kind == EventKind::alloc) ++allocs;
  });
  const TrainResult r = train(sc, bus);
  bus.unsubscribe(id);
  EXPECT_EQ(r.steps, 3);
  EXPECT_GE(kernels["linear_forward"], 9);  // 3 layers x 3 steps
  EXPECT_GE(kernels["sgd_momentum_step"], 18);
  EXPECT_GE(kernels["cross_entropy_forward"], 3);
  EXPECT_TRUE(costed) << "the ops layer's flops reach the measured spans";
  EXPECT_GE(min_start, 0.0);
  EXPECT_GT(copies, 0);
  EXPECT_GT(phases, 0);
  EXPECT_GT(allocs, 0);
}

TEST_F(CudaTrain, MemoryStatisticsComeFromTheCachingAllocatorOverCudaMalloc) {
  Scenario sc = slice_scenario("cuda");
  sc.max_steps = 4;
  const TrainResult r = run(sc);
  ASSERT_FALSE(r.memory.empty());
  const DeviceMemoryReport& m = r.memory[0];
  EXPECT_GT(m.peak_allocated_bytes, 0u);
  EXPECT_GE(m.reserved_bytes, m.allocated_bytes);
  EXPECT_EQ(m.peak_reserved_bytes % (2u << 20), 0u);  // segments of 2 MiB / 20 MiB / 2 MiB multiples
  EXPECT_GT(m.capacity_bytes, 1ull << 30);
}

}  // namespace
}  // namespace furnace
