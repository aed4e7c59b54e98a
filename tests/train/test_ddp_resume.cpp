// Resuming a `--parallel ddp` run: rank 0's checkpoint (DDP's "module." keys, the sampler's
// settings) read back by every rank. The same world size ends with the same bits as the run never
// interrupted; another world size with the same global batch continues the same samples where
// DistributedSampler's padding allows it (always at an epoch boundary) and is refused with one line
// where it does not; single-device and DDP checkpoints cross at an epoch boundary, the prefix
// fixed, and are refused inside an epoch (train/ddp_resume.h has the rule). This executable
// carries the ctest label "threads" (tsan runs it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "furnace/checkpoint.h"
#include "furnace/error.h"
#include "furnace/train.h"

namespace furnace {
namespace {

namespace fs = std::filesystem;

// The slice's 2,000 images, global batch 100 on 2 ranks: 20 optimizer steps per epoch, 40 in all.
Scenario ddp_small(int nproc) {
  Scenario sc;
  sc.data_dir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";
  sc.topology = "dgx-h100";
  sc.parallel = "ddp";
  sc.nproc = nproc;
  sc.hidden = {32};
  sc.batch = 100;
  sc.epochs = 2;
  sc.seed = 7;
  sc.evaluate = false;
  return sc;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string strip_module(const std::string& k) { return k.rfind("module.", 0) == 0 ? k.substr(7) : k; }

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return all;
}

class DdpResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("furnace_ddp_resume_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static TrainResult run_to(const Scenario& sc, const std::string& ckpt, int64_t stop = -1) {
    CheckpointOptions o;
    o.path = ckpt;
    o.stop_at_step = stop;
    TraceBus bus;
    return train(sc, bus, {}, o);
  }
  static TrainResult resume(const Scenario& sc, const std::string& from, const std::string& to,
                            bool strict_keys = false) {
    const Checkpoint ck = read_checkpoint(from);
    CheckpointOptions o;
    o.path = to;
    o.resume = &ck;
    o.resume_path = from;
    o.strict_keys = strict_keys;
    TraceBus bus;
    return train(sc, bus, {}, o);
  }
  static std::string resume_error(const Scenario& sc, const std::string& from, const std::string& to,
                                  bool strict_keys = false) {
    try {
      resume(sc, from, to, strict_keys);
    } catch (const Error& e) {
      return e.message();
    }
    return "";
  }

  fs::path dir_;
};

void expect_same_weights(const Checkpoint& a, const Checkpoint& b) {
  ASSERT_EQ(a.model.size(), b.model.size());
  for (size_t i = 0; i < a.model.size(); ++i) {
    EXPECT_EQ(strip_module(a.model[i].name), strip_module(b.model[i].name));
    EXPECT_TRUE(same_bits(a.model[i].values, b.model[i].values)) << "weights differ: " << a.model[i].name;
  }
  ASSERT_EQ(a.optimizer_state.size(), b.optimizer_state.size());
  for (size_t i = 0; i < a.optimizer_state.size(); ++i)
    EXPECT_TRUE(same_bits(a.optimizer_state[i].values, b.optimizer_state[i].values)) << a.optimizer_state[i].name;
  EXPECT_EQ(a.scaler, b.scaler);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.optimizer_steps, b.optimizer_steps);
}

// The same mean gradient summed in another order at every step: close, not equal.
void expect_close_weights(const Checkpoint& a, const Checkpoint& b) {
  ASSERT_EQ(a.model.size(), b.model.size());
  for (size_t t = 0; t < a.model.size(); ++t)
    for (size_t i = 0; i < a.model[t].values.size(); ++i)
      ASSERT_NEAR(a.model[t].values[i], b.model[t].values[i], 1e-5 + 1e-4 * std::fabs(a.model[t].values[i]))
          << a.model[t].name << "[" << i << "]";
}

TEST_F(DdpResume, RankZerosCheckpointRecordsHowTheRanksSharedTheData) {
  Scenario sc = ddp_small(2);
  run_to(sc, path("c.ckpt"), 5);
  const Checkpoint c = read_checkpoint(path("c.ckpt"));
  EXPECT_EQ(c.saved_by, "DistributedDataParallel");
  EXPECT_EQ(c.model[0].name, "module.0.weight");
  ASSERT_TRUE(c.ddp.has_value());
  EXPECT_EQ(c.ddp->world, 2);
  EXPECT_EQ(c.ddp->rank_batch, 50);
  EXPECT_TRUE(c.ddp->shuffle);
  EXPECT_EQ(c.ddp->seed, 7u);
  EXPECT_FALSE(c.ddp->drop_last);
  EXPECT_TRUE(c.ddp->set_epoch);
  EXPECT_EQ(c.ddp->padded_size, 2000);
  EXPECT_EQ(c.scenario.nproc, 2);  // --resume keeps the world size by default
  EXPECT_EQ(c.loader.next_batch, 5);
  EXPECT_EQ(c.tallies.train_samples, 5 * 50);  // rank 0's
}

TEST_F(DdpResume, SameWorldSizeInsideAnEpochIsBitIdentical) {
  const Scenario sc = ddp_small(2);
  const TrainResult straight = run_to(sc, path("straight.ckpt"));
  const TrainResult first = run_to(sc, path("broken.ckpt"), 13);
  EXPECT_TRUE(first.stopped);
  const TrainResult resumed = resume(sc, path("broken.ckpt"), path("broken.ckpt"));
  EXPECT_EQ(resumed.resumed_from_step, 13);
  EXPECT_EQ(resumed.steps, straight.steps);
  EXPECT_EQ(resumed.train_samples, straight.train_samples);
  EXPECT_EQ(std::memcmp(&resumed.final_loss, &straight.final_loss, sizeof(float)), 0)
      << resumed.final_loss << " vs " << straight.final_loss;
  EXPECT_EQ(resumed.epoch_mean_loss, straight.epoch_mean_loss);
  expect_same_weights(read_checkpoint(path("straight.ckpt")), read_checkpoint(path("broken.ckpt")));
}

TEST_F(DdpResume, Fp16AdamWWithAccumulationOnFourRanksIsBitIdentical) {
  Scenario sc = ddp_small(4);
  sc.amp = "fp16";
  sc.optimizer = "adamw";
  sc.lr = 1e-3f;
  sc.accum = 2;
  sc.batch = 40;  // 10 per rank: 50 micro-batches per epoch, 25 optimizer steps
  const TrainResult straight = run_to(sc, path("straight.ckpt"));
  run_to(sc, path("broken.ckpt"), 33);  // inside epoch 2
  const TrainResult resumed = resume(sc, path("broken.ckpt"), path("broken.ckpt"));
  EXPECT_EQ(resumed.final_loss_scale, straight.final_loss_scale);
  EXPECT_EQ(resumed.skipped_steps, straight.skipped_steps);
  EXPECT_EQ(std::memcmp(&resumed.final_loss, &straight.final_loss, sizeof(float)), 0);
  expect_same_weights(read_checkpoint(path("straight.ckpt")), read_checkpoint(path("broken.ckpt")));
}

TEST_F(DdpResume, AnotherWorldSizeWithTheSamePaddingContinuesTheSameSamples) {
  // 2,000 images pad to 2,000 for 2 ranks and for 4: the rest of the epoch draws the same samples.
  const Scenario two = ddp_small(2);
  const TrainResult straight = run_to(two, path("straight.ckpt"));
  run_to(two, path("broken.ckpt"), 13);
  const TrainResult resumed = resume(ddp_small(4), path("broken.ckpt"), path("broken.ckpt"));
  ASSERT_TRUE(resumed.ddp);
  EXPECT_EQ(resumed.ddp->world, 4);
  EXPECT_EQ(resumed.steps, 40);
  EXPECT_EQ(resumed.train_samples, straight.train_samples);  // 2 x 2,000 in all
  const std::string notes = joined(resumed.checkpoint_notes);
  EXPECT_NE(notes.find("resumed on 4 ranks from a checkpoint of 2 ranks (global batch 100): every remaining "
                       "step draws the same samples"),
            std::string::npos)
      << notes;
  expect_close_weights(read_checkpoint(path("straight.ckpt")), read_checkpoint(path("broken.ckpt")));
}

TEST_F(DdpResume, AnotherWorldSizeWhosePaddingDiffersIsRefusedInsideAnEpochOnly) {
  // Global batch 120: 2,000 images pad to 2,000 for 2 ranks, to 2,001 for 3. 17 steps per epoch.
  Scenario two = ddp_small(2);
  two.batch = 120;
  Scenario three = two;
  three.nproc = 3;
  run_to(two, path("mid.ckpt"), 5);
  const std::string e = resume_error(three, path("mid.ckpt"), path("out.ckpt"));
  EXPECT_NE(e.find("was saved by 2 ranks inside epoch 1 (at batch 5 of 17): DistributedSampler pads each "
                   "epoch's order to ceil(N / world) * world samples, 2000 for 2 ranks and 2001 for 3"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("resume on 2 ranks (--nproc 2, or a launcher's --nproc-per-node 2), or from a checkpoint saved at an epoch boundary (a step that is a "
                   "multiple of 17)"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  // The same world size goes on.
  EXPECT_EQ(resume(two, path("mid.ckpt"), path("out2.ckpt")).steps, 34);
  // At the epoch boundary the new world size starts the next epoch.
  run_to(two, path("edge.ckpt"), 17);
  const TrainResult r = resume(three, path("edge.ckpt"), path("edge.ckpt"));
  EXPECT_EQ(r.steps, 34);
  EXPECT_EQ(r.ddp->world, 3);
  EXPECT_TRUE(std::isfinite(r.final_loss));
  EXPECT_NE(joined(r.checkpoint_notes).find("resumed on 3 ranks from a checkpoint of 2 ranks"), std::string::npos);
}

TEST_F(DdpResume, AnotherSamplerIsRefused) {
  run_to(ddp_small(2), path("c.ckpt"), 5);
  Scenario forgets = ddp_small(2);
  forgets.sampler_set_epoch = false;
  const std::string e = resume_error(forgets, path("c.ckpt"), path("out.ckpt"));
  EXPECT_NE(e.find("its DistributedSampler(shuffle=True, seed=7, drop_last=False) with set_epoch called is not "
                   "this run's"),
            std::string::npos)
      << e;
}

TEST_F(DdpResume, SingleDeviceCheckpointIntoDdpAtAnEpochBoundaryGainsThePrefix) {
  Scenario single = ddp_small(2);
  single.parallel = "none";
  single.nproc = -1;
  run_to(single, path("edge.ckpt"), 20);
  const TrainResult r = resume(ddp_small(2), path("edge.ckpt"), path("out.ckpt"));
  EXPECT_EQ(r.steps, 40);
  const std::string notes = joined(r.checkpoint_notes);
  EXPECT_NE(notes.find("this model's (DistributedDataParallel): module.0.weight"), std::string::npos) << notes;
  EXPECT_NE(notes.find("this run wraps the model in nn.parallel.DistributedDataParallel"), std::string::npos) << notes;
  EXPECT_NE(notes.find("resumed at an epoch boundary in another mode (saved by a single-device run, continued by 2 "
                       "ranks of DDP)"),
            std::string::npos)
      << notes;
  const Checkpoint out = read_checkpoint(path("out.ckpt"));
  EXPECT_EQ(out.model[0].name, "module.0.weight");
  EXPECT_EQ(out.saved_by, "DistributedDataParallel");
  // --strict-keys: PyTorch's error for the DDP model's load_state_dict.
  const std::string strict = resume_error(ddp_small(2), path("edge.ckpt"), path("strict.ckpt"), true);
  EXPECT_NE(strict.find("Error(s) in loading state_dict for DistributedDataParallel: Missing key(s) in state_dict: "
                        "\"module.0.weight\""),
            std::string::npos)
      << strict;
  // Inside an epoch the DataLoader's shuffle cannot become the sampler's order.
  run_to(single, path("mid.ckpt"), 13);
  const std::string e = resume_error(ddp_small(2), path("mid.ckpt"), path("out2.ckpt"));
  EXPECT_NE(e.find("was saved by a single-device run inside epoch 1 (at batch 13 of 20): the DataLoader's own "
                   "shuffle is not the order DistributedSampler gives --parallel ddp"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("resume with --parallel none (its own mode), or from a checkpoint saved at an epoch boundary"),
            std::string::npos)
      << e;
}

TEST_F(DdpResume, DdpCheckpointIntoOneDeviceAtAnEpochBoundaryLosesThePrefix) {
  run_to(ddp_small(2), path("edge.ckpt"), 20);
  Scenario single = ddp_small(2);
  single.parallel = "none";
  single.nproc = -1;
  const TrainResult r = resume(single, path("edge.ckpt"), path("out.ckpt"));
  EXPECT_EQ(r.steps, 40);
  EXPECT_EQ(r.train_samples, 4000);  // 2 ranks x 1,000, then 2,000 on one device
  const std::string notes = joined(r.checkpoint_notes);
  EXPECT_NE(notes.find("the checkpoint's (saved by DistributedDataParallel): module.0.weight"), std::string::npos)
      << notes;
  EXPECT_NE(notes.find("Furnace strips the prefix"), std::string::npos) << notes;
  const Checkpoint out = read_checkpoint(path("out.ckpt"));
  EXPECT_EQ(out.model[0].name, "0.weight");
  EXPECT_FALSE(out.ddp.has_value());

  run_to(ddp_small(2), path("mid.ckpt"), 13);
  const std::string e = resume_error(single, path("mid.ckpt"), path("out2.ckpt"));
  EXPECT_NE(e.find("was saved by 2 DDP ranks inside epoch 1 (at batch 13 of 20): DistributedSampler's order is "
                   "not the DataLoader's own shuffle"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("resume with --parallel ddp --nproc 2 (its own mode)"), std::string::npos) << e;
}

}  // namespace
}  // namespace furnace
