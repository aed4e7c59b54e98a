// Resuming training from a checkpoint, through the library (train() with CheckpointOptions) on the
// committed Fashion-MNIST slice: a run interrupted and resumed ends with the same bits as the run
// that was never interrupted (weights, momentum, GradScaler, losses, accuracy), on one device and
// with DataParallel, with fp16 + GradScaler, from an epoch boundary and from the middle of an
// epoch (loader workers too); checkpoints cross between DataParallel and one device ("module.");
// a checkpoint that does not fit is refused with one line.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "furnace/checkpoint.h"
#include "furnace/error.h"
#include "furnace/train.h"

namespace furnace {
namespace {

namespace fs = std::filesystem;

std::string slice() { return std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist"; }

// 2,000 images, batch 100: 20 optimizer steps per epoch, 40 in all.
Scenario small() {
  Scenario sc;
  sc.data_dir = slice();
  sc.hidden = {32};
  sc.batch = 100;
  sc.epochs = 2;
  sc.seed = 7;
  return sc;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string strip_module(const std::string& k) { return k.rfind("module.", 0) == 0 ? k.substr(7) : k; }

// Two final checkpoints hold the same training state, bit for bit (keys compared without the
// "module." prefix when `ignore_prefix`).
void expect_same_state(const Checkpoint& a, const Checkpoint& b, bool ignore_prefix = false) {
  ASSERT_EQ(a.model.size(), b.model.size());
  for (size_t i = 0; i < a.model.size(); ++i) {
    EXPECT_EQ(ignore_prefix ? strip_module(a.model[i].name) : a.model[i].name,
              ignore_prefix ? strip_module(b.model[i].name) : b.model[i].name);
    EXPECT_EQ(a.model[i].shape, b.model[i].shape);
    EXPECT_TRUE(same_bits(a.model[i].values, b.model[i].values)) << "weights differ: " << a.model[i].name;
  }
  ASSERT_EQ(a.optimizer_state.size(), b.optimizer_state.size());
  for (size_t i = 0; i < a.optimizer_state.size(); ++i) {
    EXPECT_EQ(a.optimizer_state[i].name, b.optimizer_state[i].name);
    EXPECT_TRUE(same_bits(a.optimizer_state[i].values, b.optimizer_state[i].values)) << "momentum differs: " << a.optimizer_state[i].name;
  }
  EXPECT_EQ(a.scaler, b.scaler);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.optimizer_steps, b.optimizer_steps);
  EXPECT_EQ(a.loader.epoch, b.loader.epoch);
  EXPECT_EQ(a.loader.next_batch, b.loader.next_batch);
  EXPECT_EQ(a.tallies.train_samples, b.tallies.train_samples);
  EXPECT_EQ(a.tallies.skipped_steps, b.tallies.skipped_steps);
  EXPECT_EQ(a.tallies.epoch_mean_loss, b.tallies.epoch_mean_loss);
}

void expect_same_result(const TrainResult& a, const TrainResult& b) {
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.epochs, b.epochs);
  EXPECT_EQ(a.train_samples, b.train_samples);
  EXPECT_EQ(a.final_loss, b.final_loss);
  EXPECT_EQ(a.epoch_mean_loss, b.epoch_mean_loss);
  EXPECT_EQ(a.test_accuracy, b.test_accuracy);
  EXPECT_EQ(a.skipped_steps, b.skipped_steps);
  EXPECT_EQ(a.final_loss_scale, b.final_loss_scale);
}

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("furnace_resume_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static TrainResult run(const Scenario& sc, const CheckpointOptions& o, const ProgressFn& progress = {}) {
    TraceBus bus;
    return train(sc, bus, progress, o);
  }
  static TrainResult run_to(const Scenario& sc, const std::string& ckpt, int64_t save_every = 0) {
    CheckpointOptions o;
    o.path = ckpt;
    o.save_every = save_every;
    return run(sc, o);
  }
  static TrainResult resume(const Scenario& sc, const std::string& from, const std::string& to,
                            std::vector<std::string>* notes = nullptr) {
    const Checkpoint ck = read_checkpoint(from);
    CheckpointOptions o;
    o.path = to;
    o.resume = &ck;
    o.resume_path = from;
    const TrainResult r = run(sc, o);
    if (notes) *notes = r.checkpoint_notes;
    return r;
  }

  // The straight run, then one stopped at `stop` (or crashed after step `crash`, the last
  // --save-every checkpoint surviving) and resumed: the same final state, bit for bit.
  void expect_resume_is_exact(const Scenario& sc, int64_t stop, int64_t crash = -1, int64_t save_every = 0) {
    const TrainResult straight = run_to(sc, path("straight.ckpt"));
    CheckpointOptions o;
    o.path = path("broken.ckpt");
    o.save_every = save_every;
    o.stop_at_step = stop;
    TrainResult first;
    if (crash > 0) {
      // The process dies after step `crash`: nothing after the last periodic save survives.
      EXPECT_THROW(run(sc, o, [crash](const Progress& p) {
                     if (p.global_step == crash) throw TrainingStopped();
                   }),
                   TrainingStopped);
    } else {
      first = run(sc, o);
      EXPECT_TRUE(first.stopped);
      EXPECT_LT(first.test_accuracy, 0) << "a stopped run is not evaluated";
    }
    const Checkpoint midway = read_checkpoint(path("broken.ckpt"));
    EXPECT_EQ(midway.step, crash > 0 ? crash / save_every * save_every : stop);
    const TrainResult resumed = resume(sc, path("broken.ckpt"), path("broken.ckpt"));
    EXPECT_EQ(resumed.resumed_from_step, midway.step);
    expect_same_result(straight, resumed);
    expect_same_state(read_checkpoint(path("straight.ckpt")), read_checkpoint(path("broken.ckpt")));
  }

  fs::path dir_;
};

TEST_F(Resume, OneEpochThenResumeEqualsTwoEpochsBitForBit) {
  expect_resume_is_exact(small(), /*stop=*/20);
}

TEST_F(Resume, Fp16WithGradScalerIsBitIdentical) {
  Scenario sc = small();
  sc.amp = "fp16";
  sc.scaler.init_scale = 16777216.0;  // 2^24: early steps overflow and are skipped
  sc.scaler.growth_interval = 3;      // and the scale grows back often
  const TrainResult probe = run(sc, {});
  ASSERT_GT(probe.skipped_steps, 0) << "the scenario must exercise the scaler's backoff";
  expect_resume_is_exact(sc, /*stop=*/20);
  expect_resume_is_exact(sc, /*stop=*/7);
}

TEST_F(Resume, DataParallelIsBitIdentical) {
  Scenario sc = small();
  sc.topology = "workstation-4x3090";
  sc.parallel = "dp";
  expect_resume_is_exact(sc, /*stop=*/20);
  sc.amp = "fp16";
  sc.batch = 90;  // chunks 23, 23, 23, 21
  expect_resume_is_exact(sc, /*stop=*/11);
}

// AdamW's state (exp_avg, exp_avg_sq and each parameter's step) goes through the checkpoint: with
// fp16 steps skipped (their step not counted), DataParallel, accumulation and clipping.
TEST_F(Resume, AdamWIsBitIdentical) {
  Scenario sc = small();
  sc.optimizer = "adamw";
  sc.lr = 1e-3f;
  expect_resume_is_exact(sc, /*stop=*/13);
  sc.amp = "fp16";
  sc.scaler.init_scale = 16777216.0;  // early steps overflow and are skipped
  sc.scaler.growth_interval = 3;
  sc.clip_grad_norm = 1.0f;
  const TrainResult probe = run(sc, {});
  ASSERT_GT(probe.skipped_steps, 0) << "the scenario must skip AdamW steps";
  expect_resume_is_exact(sc, /*stop=*/7);
  sc.topology = "workstation-4x3090";
  sc.parallel = "dp";
  sc.accum = 2;
  expect_resume_is_exact(sc, /*stop=*/5);
}

TEST_F(Resume, FromAMidEpochPeriodicCheckpointIsBitIdentical) {
  // Crashed after step 25; the checkpoint of step 21 (every 7) is what remains: epoch 2, batch 1.
  expect_resume_is_exact(small(), /*stop=*/-1, /*crash=*/25, /*save_every=*/7);
}

TEST_F(Resume, WithLoaderWorkersAndAccumulationIsBitIdentical) {
  Scenario sc = small();
  sc.workers = 3;
  sc.pin_memory = true;
  sc.accum = 2;  // 10 optimizer steps per epoch
  expect_resume_is_exact(sc, /*stop=*/-1, /*crash=*/8, /*save_every=*/3);  // resumes at micro-batch 12 of 20
  sc.batch = 300;  // 7 batches per epoch, the last of 200: groups of 2, 2, 2, 1
  expect_resume_is_exact(sc, /*stop=*/5);
}

TEST_F(Resume, ExtendingAConstantRateRunEqualsTheLongerRun) {
  Scenario one = small();
  one.lr_schedule = "constant";
  one.epochs = 1;
  Scenario two = one;
  two.epochs = 2;
  const TrainResult straight = run_to(two, path("two.ckpt"));
  run_to(one, path("one.ckpt"));
  const TrainResult resumed = resume(two, path("one.ckpt"), path("extended.ckpt"));
  expect_same_result(straight, resumed);
  expect_same_state(read_checkpoint(path("two.ckpt")), read_checkpoint(path("extended.ckpt")));
}

TEST_F(Resume, CosineScheduleRefusesANewLength) {
  run_to(small(), path("a.ckpt"));
  Scenario longer = small();
  longer.epochs = 3;
  try {
    resume(longer, path("a.ckpt"), path("b.ckpt"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to a run of 40 optimizer steps and this one has 60"), std::string::npos)
        << e.what();
  }
}

TEST_F(Resume, DataParallelAndSingleDeviceCheckpointsCrossWithTheSameBits) {
  Scenario dp = small();
  dp.topology = "workstation-4x3090";
  dp.parallel = "dp";
  run_to(dp, path("dp.ckpt"));
  const Checkpoint from_dp = read_checkpoint(path("dp.ckpt"));
  EXPECT_EQ(from_dp.saved_by, "DataParallel");
  EXPECT_EQ(from_dp.model[0].name, "module.0.weight");

  // At its end: nothing left to train; the resumed run re-saves what it loaded, bare.
  Scenario single = dp;
  single.parallel = "none";
  std::vector<std::string> notes;
  const TrainResult r = resume(single, path("dp.ckpt"), path("single.ckpt"), &notes);
  EXPECT_EQ(r.steps, 40);
  const Checkpoint as_single = read_checkpoint(path("single.ckpt"));
  EXPECT_EQ(as_single.saved_by, "Sequential");
  EXPECT_EQ(as_single.model[0].name, "0.weight");
  expect_same_state(from_dp, as_single, /*ignore_prefix=*/true);
  std::string all;
  for (const std::string& n : notes) all += n + "\n";
  EXPECT_NE(all.find("module.0.weight, module.0.bias"), std::string::npos) << all;
  EXPECT_NE(all.find("Furnace strips the prefix"), std::string::npos) << all;

  // And back: the bare checkpoint into DataParallel gains the prefix.
  resume(dp, path("single.ckpt"), path("dp_again.ckpt"), &notes);
  const Checkpoint again = read_checkpoint(path("dp_again.ckpt"));
  EXPECT_EQ(again.model[0].name, "module.0.weight");
  expect_same_state(from_dp, again);
}

TEST_F(Resume, DataParallelCheckpointContinuesOnOneDevice) {
  Scenario dp = small();
  dp.topology = "workstation-4x3090";
  dp.parallel = "dp";
  const TrainResult straight_dp = run_to(dp, path("dp.ckpt"));
  CheckpointOptions o;
  o.path = path("half.ckpt");
  o.stop_at_step = 13;
  run(dp, o);
  Scenario single = dp;
  single.parallel = "none";
  const TrainResult finished = resume(single, path("half.ckpt"), path("half.ckpt"));
  EXPECT_FALSE(finished.dp.has_value());
  // DataParallel sums the replicas' gradients in another order than one device does: the same
  // run up to fp32 reassociation, not bit for bit.
  const Checkpoint a = read_checkpoint(path("dp.ckpt")), b = read_checkpoint(path("half.ckpt"));
  for (size_t t = 0; t < a.model.size(); ++t)
    for (size_t i = 0; i < a.model[t].values.size(); ++i)
      ASSERT_NEAR(a.model[t].values[i], b.model[t].values[i], 1e-5 + 1e-4 * std::fabs(a.model[t].values[i]))
          << a.model[t].name << "[" << i << "]";
  EXPECT_NEAR(finished.test_accuracy, straight_dp.test_accuracy, 0.01);
}

TEST_F(Resume, StrictKeysFailsAsPyTorchDoes) {
  Scenario dp = small();
  dp.topology = "workstation-4x3090";
  dp.parallel = "dp";
  dp.max_steps = 2;
  run_to(dp, path("dp.ckpt"));
  const Checkpoint ck = read_checkpoint(path("dp.ckpt"));
  Scenario single = dp;
  single.parallel = "none";
  CheckpointOptions o;
  o.resume = &ck;
  o.resume_path = "dp.ckpt";
  o.strict_keys = true;
  try {
    run(single, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "checkpoint dp.ckpt (--strict-keys, as PyTorch's model.load_state_dict): Error(s) in loading "
                 "state_dict for Sequential: Missing key(s) in state_dict: \"0.weight\", \"0.bias\", \"2.weight\", "
                 "\"2.bias\".  Unexpected key(s) in state_dict: \"module.0.weight\", \"module.0.bias\", "
                 "\"module.2.weight\", \"module.2.bias\".");
  }
}

TEST_F(Resume, ACheckpointOfAnotherModelShapeIsRefused) {
  run_to(small(), path("a.ckpt"));
  Scenario wider = small();
  wider.hidden = {48};
  try {
    resume(wider, path("a.ckpt"), path("b.ckpt"));
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("does not fit this model (MLP 784-48-10; the checkpoint's scenario has --hidden 32)"),
              std::string::npos) << m;
    EXPECT_NE(m.find("size mismatch for 0.weight: copying a param with shape torch.Size([32, 784]) from "
                     "checkpoint, the shape in current model is torch.Size([48, 784])."),
              std::string::npos) << m;
  }
  Scenario deeper = small();
  deeper.hidden = {32, 32};
  try {
    resume(deeper, path("a.ckpt"), path("b.ckpt"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Missing key(s) in state_dict: \"4.weight\", \"4.bias\"."), std::string::npos)
        << e.what();
  }
}

TEST_F(Resume, OtherTrainingDataIsRefused) {
  run_to(small(), path("a.ckpt"));
  // The slice with one pixel of one training image changed (raw IDX next to the other .gz files).
  const fs::path data = dir_ / "data";
  fs::create_directories(data);
  for (const auto& e : fs::directory_iterator(slice()))
    if (e.path().extension() == ".gz" && e.path().filename() != "train-images-idx3-ubyte.gz")
      fs::copy_file(e.path(), data / e.path().filename());
  gzFile in = gzopen((fs::path(slice()) / "train-images-idx3-ubyte.gz").c_str(), "rb");
  ASSERT_NE(in, nullptr);
  std::string bytes;
  char buf[65536];
  int n;
  while ((n = gzread(in, buf, sizeof buf)) > 0) bytes.append(buf, static_cast<size_t>(n));
  gzclose(in);
  bytes[16 + 400] = static_cast<char>(bytes[16 + 400] ^ 0x01);
  std::ofstream(data / "train-images-idx3-ubyte", std::ios::binary) << bytes;
  Scenario other = small();
  other.data_dir = data.string();
  try {
    resume(other, path("a.ckpt"), path("b.ckpt"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("was trained on other data (2000 images, CRC32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace furnace
