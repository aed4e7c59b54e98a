// `--parallel ddp` as a TrainingRun: ranks as processes of one simulated machine, stepped together;
// every GPU holds the same memory and is as busy per step (no GPU 0 bottleneck); PyTorch's two
// rebuilt buckets for the reference MLP; no_sync keeps accumulation to one all-reduce per
// optimizer step; the ranks' GPUs follow CUDA_VISIBLE_DEVICES; rank 0 alone writes the checkpoint,
// with DDP's "module." keys; bad input is one line each. This executable carries the ctest label
// "threads" (tsan runs it).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "furnace/checkpoint.h"
#include "furnace/error.h"
#include "furnace/backend.h"     // defines: cuda_backend_built, nccl_built
#include "furnace/launch_env.h"  // defines: pick_free_port
#include "furnace/train.h"
#include "train/ddp_ranks.h"     // defines: check_ddp_backend

namespace furnace {
namespace {

Scenario ddp_scenario(const std::string& topology) {
  Scenario sc;
  sc.data_dir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  sc.topology = topology;
  sc.parallel = "ddp";
  sc.epochs = 1;
  sc.max_steps = 4;
  sc.evaluate = false;
  return sc;
}

TEST(DdpTraining, FourRanksTrainTogetherAndEveryGpuHoldsTheSame) {
  Scenario sc = ddp_scenario("workstation-4x3090");
  sc.evaluate = true;
  TraceBus bus;
  const TrainResult r = train(sc, bus);
  ASSERT_TRUE(r.ddp);
  EXPECT_EQ(r.ddp->world, 4);
  EXPECT_EQ(r.ddp->rank_batch, 64);
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.train_samples, 4 * 256);  // every rank's samples
  EXPECT_TRUE(std::isfinite(r.final_loss));
  EXPECT_GT(r.test_accuracy, 0.0);  // rank 0 evaluates
  // PyTorch 1.13's rebuilt buckets for 784-512-512-10 (semantics.md section 7).
  EXPECT_EQ(r.ddp->bucket_bytes, (std::vector<uint64_t>{1071144, 1607680}));
  ASSERT_EQ(r.ddp->ranks.size(), 4u);
  ASSERT_EQ(r.memory.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    const DdpRankReport& rank = r.ddp->ranks[static_cast<size_t>(k)];
    EXPECT_EQ(rank.rank, k);
    EXPECT_EQ(rank.device, k);
    EXPECT_EQ(rank.physical, k);
    // Parameters, gradients, buckets and momentum on each: the same bytes on every GPU. Only rank
    // 0 evaluates, so only its peak holds the test batches' activations too.
    EXPECT_EQ(r.memory[static_cast<size_t>(k)].allocated_bytes, r.memory[0].allocated_bytes) << "cuda:" << k;
    EXPECT_LE(r.memory[static_cast<size_t>(k)].peak_allocated_bytes, r.memory[0].peak_allocated_bytes) << "cuda:" << k;
    EXPECT_GT(rank.comm_s, 0.0);
    EXPECT_LE(rank.exposed_s, rank.comm_s + 1e-12);
    // Busy per training step: rank 0's evaluation of the test set after training is not a step
    // (counted in, it made GPU 0 look busier than the others in the report).
    EXPECT_NEAR(rank.busy_s, r.ddp->ranks[0].busy_s, 1e-9 * r.ddp->ranks[0].busy_s) << "rank " << k;
  }
  EXPECT_GT(r.memory[0].peak_allocated_bytes, 3u * 2678824u);  // params + grads + buckets (+ momentum)
}

TEST(DdpTraining, AccumulationUnderNoSyncAllReducesOncePerOptimizerStep) {
  Scenario sc = ddp_scenario("dgx-h100");
  sc.nproc = 2;
  sc.accum = 4;
  TraceBus bus;
  const TrainResult r = train(sc, bus);
  ASSERT_TRUE(r.ddp);
  EXPECT_EQ(r.ddp->world, 2);
  // The slice's 2000 images, 1000 per rank: 7 micro-batches of 128 and one of 104 each, which
  // make two optimizer steps of four micro-batches.
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.train_samples, 2000);
  EXPECT_EQ(r.ddp->allreduce_bytes_per_step, 2678824u);  // the gradients once, not four times
  EXPECT_EQ(r.ddp->sent_bytes_per_step, 2678824u);       // 2(n-1)/n = 1 for two ranks
}

TEST(DdpTraining, TheRanksGpusAreTheVisibleOnes) {
  Scenario sc = ddp_scenario("workstation-4x3090");
  sc.env["CUDA_VISIBLE_DEVICES"] = "3,1";
  TraceBus bus;
  const TrainResult r = train(sc, bus);
  ASSERT_TRUE(r.ddp);
  ASSERT_EQ(r.ddp->world, 2);
  EXPECT_EQ(r.ddp->ranks[0].physical, 3);
  EXPECT_EQ(r.ddp->ranks[1].physical, 1);
}

TEST(DdpTraining, RankZeroAloneWritesTheCheckpointWithModulePrefixedKeys) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("furnace-ddp-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Scenario sc = ddp_scenario("dgx-h100");
  sc.nproc = 3;
  sc.batch = 255;
  CheckpointOptions ck;
  ck.path = (dir / "ddp.ckpt").string();
  TraceBus bus;
  const TrainResult r = train(sc, bus, {}, ck);
  EXPECT_EQ(r.checkpoints_saved, 1);
  const Checkpoint c = read_checkpoint(ck.path);
  EXPECT_EQ(c.saved_by, "DistributedDataParallel");
  ASSERT_FALSE(c.model.empty());
  for (const StateTensor& t : c.model) EXPECT_EQ(t.name.rfind("module.", 0), 0u) << t.name;
  ASSERT_TRUE(c.ddp.has_value());
  EXPECT_EQ(c.ddp->world, 3);
  EXPECT_EQ(c.ddp->rank_batch, 85);
  // Every rank reads it back (tests/train/test_ddp_resume.cpp resumes runs midway): here at its end.
  CheckpointOptions again;
  again.resume = &c;
  again.resume_path = ck.path;
  TraceBus bus2;
  const TrainResult resumed = train(sc, bus2, {}, again);
  EXPECT_EQ(resumed.resumed_from_step, 4);
  EXPECT_EQ(resumed.steps, 4);
  std::filesystem::remove_all(dir);
}

std::string error_of(const Scenario& sc) {
  TraceBus bus;
  try {
    train(sc, bus);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(DdpTraining, BadInputIsOneLineEach) {
  Scenario sc = ddp_scenario("workstation-4x3090");
  sc.nproc = 5;
  EXPECT_NE(error_of(sc).find("--nproc 5: rank 4 would call torch.cuda.set_device(4) (its LOCAL_RANK), but the "
                              "processes see 4 GPUs"),
            std::string::npos)
      << error_of(sc);
  sc.nproc = -1;
  sc.bucket_cap_mb = 0;
  EXPECT_NE(error_of(sc).find("--bucket-cap-mb must be a positive number of megabytes (got 0)"), std::string::npos);
  sc.bucket_cap_mb = -3;
  EXPECT_NE(error_of(sc).find("--bucket-cap-mb must be a positive"), std::string::npos);
  sc.bucket_cap_mb = 25;
  sc.batch = 3;
  EXPECT_NE(error_of(sc).find("--batch 3 is smaller than the 4 ranks"), std::string::npos) << error_of(sc);
  sc.batch = 255;
  EXPECT_NE(error_of(sc).find("--batch 255 does not split evenly over 4 ranks"), std::string::npos) << error_of(sc);
  sc.batch = 256;
  sc.env["CUDA_VISIBLE_DEVICES"] = "-1";
  EXPECT_NE(error_of(sc).find("the processes see no GPU"), std::string::npos) << error_of(sc);
  sc.env.clear();
  sc.device = 2;
  EXPECT_NE(error_of(sc).find("--device does not apply to --parallel ddp"), std::string::npos) << error_of(sc);
  sc.device = 0;
  sc.parallel = "none";
  sc.nproc = 2;
  EXPECT_NE(error_of(sc).find("--nproc needs --parallel ddp"), std::string::npos) << error_of(sc);
}

// The ranks as threads of one process run on the simulator only; under a launcher (one process
// per rank) --backend cuda is allowed where the cuda backend was built with NCCL, and says which
// is missing otherwise. (ctest sets FURNACE_BACKEND=sim: auto is the simulator here.)
TEST(DdpTraining, TheBackendIsTheSimulatorInThreadsAndCudaOnlyUnderALauncher) {
  Scenario sc = ddp_scenario("workstation-4x3090");
  auto error_of_check = [&](bool launched) {
    try {
      return "returned " + check_ddp_backend(sc, launched);
    } catch (const Error& e) {
      return e.message();
    }
  };
  for (const char* b : {"sim", "auto"}) {
    sc.backend = b;
    EXPECT_EQ(error_of_check(false), "returned sim") << b;
    EXPECT_EQ(error_of_check(true), "returned sim") << b;
  }
  sc.backend = "cuda";
  EXPECT_EQ(error_of_check(false),
            "--parallel ddp --backend cuda runs one process per GPU: start it under a launcher (furnace launch "
            "--nproc-per-node N -- furnace train --parallel ddp --backend cuda, or torchrun, mpirun, srun); the ranks "
            "as threads of this process run on the simulator only (--backend sim)");
  const std::string launched = error_of_check(true);
  if (!cuda_backend_built())
    EXPECT_EQ(launched,
              "--parallel ddp --backend cuda: this furnace was built without the CUDA backend (nvcc was not found at "
              "configure time); use --backend sim (Gloo between the processes)");
  else if (!nccl_built())
    EXPECT_EQ(launched,
              "--parallel ddp --backend cuda all-reduces the ranks' gradients with NCCL, and this furnace was built "
              "without NCCL (not found at configure time, or FURNACE_WITH_NCCL=OFF); use --backend sim (Gloo "
              "between the processes)");
  else
    EXPECT_EQ(launched, "returned cuda");
  sc.backend = "tpu";
  EXPECT_EQ(error_of_check(true), "unknown backend 'tpu' (choose sim or cuda)");
  // Through train(): the in-process ranks refuse cuda before anything starts.
  sc.backend = "cuda";
  EXPECT_NE(error_of(sc).find("start it under a launcher"), std::string::npos) << error_of(sc);
}

// A launched rank with --backend cuda on this machine: one line naming the rank and what is
// missing (no CUDA backend, no NCCL, or no GPU: the cuda backend's own words), never the simulator.
TEST(DdpTraining, ALaunchedCudaRankWithoutAGpuIsOneLineNamingTheRank) {
  Scenario sc = ddp_scenario("workstation-4x3090");
  sc.backend = "cuda";
  sc.dist_timeout_s = 5;
  sc.env["RANK"] = "0";
  sc.env["WORLD_SIZE"] = "1";
  sc.env["LOCAL_RANK"] = "0";
  sc.env["LOCAL_WORLD_SIZE"] = "1";
  sc.env["MASTER_ADDR"] = "127.0.0.1";
  sc.env["MASTER_PORT"] = std::to_string(pick_free_port("127.0.0.1"));
  if (cuda_backend_built() && cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU (tests/cuda trains on it)";
  const std::string e = error_of(sc);
  EXPECT_EQ(e.rfind("rank 0: ", 0), 0u) << e;
  if (!cuda_backend_built())
    EXPECT_NE(e.find("built without the CUDA backend"), std::string::npos) << e;
  else if (!nccl_built())
    EXPECT_NE(e.find("built without NCCL"), std::string::npos) << e;
  else
    EXPECT_NE(e.find("--backend cuda: "), std::string::npos) << e;
}

}  // namespace
}  // namespace furnace
