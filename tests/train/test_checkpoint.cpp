// Checkpoints without training: the file format and its reader (every way a file can be bad gets
// one clear line), the atomic write, PyTorch's load_state_dict key rules with DataParallel's
// "module." prefix, which options a resumed run may change, and the host-memory estimate.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "furnace/checkpoint.h"
#include "furnace/error.h"
#include "furnace/host_memory.h"
#include "support/scratch_dir.h"  // defines: ScratchDir

namespace furnace {
namespace {

namespace fs = std::filesystem;

Checkpoint small_checkpoint(bool dp = false) {
  Checkpoint c;
  c.scenario.hidden = {3};
  c.scenario.epochs = 2;
  c.scenario.batch = 4;
  c.scenario.amp = "fp16";
  const std::string p = dp ? "module." : "";
  c.model = {{p + "0.weight", {3, 784}, std::vector<float>(3 * 784, 0.25f)},
             {p + "0.bias", {3}, {0, -1, INFINITY}},
             {p + "2.weight", {10, 3}, std::vector<float>(30, -0.5f)},
             {p + "2.bias", {10}, std::vector<float>(10, NAN)}};
  c.optimizer_state = {{"state.1.momentum_buffer", {3}, {1, 2, 3}}};
  c.step = 7;
  c.total_steps = 40;
  c.save_every = 5;
  c.saved_by = dp ? "DataParallel" : "Sequential";
  c.optimizer_steps = 6;
  c.scaler = {{"scale", 32768}, {"growth_factor", 2}, {"backoff_factor", 0.5}, {"growth_interval", 2000}, {"_growth_tracker", 5}};
  c.loader = {1, 3, 0, 2000, 0xdeadbeefu, 0x01020304u};
  c.tallies = {2800, 1, 3, 1.5, NAN, {0.75f}};
  return c;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse_checkpoint(bytes.data(), bytes.size(), "x.ckpt");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}

// Recomputes the trailing CRC32 after an edit, so the reader gets past the checksum.
std::vector<uint8_t> with_fixed_crc(std::vector<uint8_t> b) {
  const uint32_t crc = static_cast<uint32_t>(::crc32(::crc32(0L, Z_NULL, 0), b.data(), static_cast<uInt>(b.size() - 4)));
  put_u32(b, b.size() - 4, crc);
  return b;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CheckpointFormat, RoundTripKeepsEveryFieldAndEveryBit) {
  const Checkpoint c = small_checkpoint(true);
  const std::vector<uint8_t> bytes = serialize_checkpoint(c);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "FURNCKPT");
  const Checkpoint r = parse_checkpoint(bytes.data(), bytes.size(), "mem");
  ASSERT_EQ(r.model.size(), c.model.size());
  for (size_t i = 0; i < c.model.size(); ++i) {
    EXPECT_EQ(r.model[i].name, c.model[i].name);
    EXPECT_EQ(r.model[i].shape, c.model[i].shape);
    EXPECT_TRUE(same_bits(r.model[i].values, c.model[i].values)) << c.model[i].name;  // inf and NaN too
  }
  ASSERT_EQ(r.optimizer_state.size(), 1u);
  EXPECT_EQ(r.optimizer_state[0].name, "state.1.momentum_buffer");
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.total_steps, 40);
  EXPECT_EQ(r.save_every, 5);
  EXPECT_EQ(r.saved_by, "DataParallel");
  EXPECT_EQ(r.optimizer_steps, 6);
  EXPECT_EQ(r.scaler, c.scaler);
  EXPECT_EQ(r.loader.epoch, 1);
  EXPECT_EQ(r.loader.next_batch, 3);
  EXPECT_EQ(r.loader.dataset_crc, 0xdeadbeefu);
  EXPECT_EQ(r.loader.order_crc, 0x01020304u);
  EXPECT_EQ(r.tallies.train_samples, 2800);
  EXPECT_EQ(r.tallies.epoch_loss_sum, 1.5);
  EXPECT_TRUE(std::isnan(r.tallies.last_loss));  // a diverged loss survives ("nan" in the JSON)
  EXPECT_EQ(r.tallies.epoch_mean_loss, std::vector<float>{0.75f});
  EXPECT_EQ(r.scenario.hidden, std::vector<int>{3});
  EXPECT_EQ(r.scenario.amp, "fp16");
  EXPECT_EQ(serialize_checkpoint(r), bytes);  // deterministic: the same state gives the same bytes
}

TEST(CheckpointFormat, EveryTruncationIsOneLineNeverACrash) {
  const std::vector<uint8_t> bytes = serialize_checkpoint(small_checkpoint());
  for (size_t n = 0; n < bytes.size(); n += (n < 64 ? 1 : 97)) {
    const std::string e = error_of(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(n)));
    ASSERT_FALSE(e.empty()) << n << " bytes were accepted";
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.rfind("checkpoint x.ckpt: ", 0), 0u) << e;
    if (n >= 8) EXPECT_NE(e.find("truncated"), std::string::npos) << n << ": " << e;
  }
}

TEST(CheckpointFormat, BadMagicVersionChecksumAndTrailingBytes) {
  std::vector<uint8_t> b = serialize_checkpoint(small_checkpoint());
  std::vector<uint8_t> magic = b;
  magic[0] = 'P';
  EXPECT_NE(error_of(magic).find("not a Furnace checkpoint"), std::string::npos) << error_of(magic);
  EXPECT_NE(error_of({'P', 'K'}).find("not a Furnace checkpoint"), std::string::npos);

  std::vector<uint8_t> version = b;
  put_u32(version, 8, 2);
  EXPECT_NE(error_of(with_fixed_crc(version)).find("version 2 is not supported (this furnace reads version 1)"),
            std::string::npos)
      << error_of(with_fixed_crc(version));

  std::vector<uint8_t> flipped = b;
  flipped[b.size() / 2] ^= 0x10;  // a bit in the model's values
  EXPECT_NE(error_of(flipped).find("checksum mismatch (CRC32 stored"), std::string::npos) << error_of(flipped);

  std::vector<uint8_t> longer = b;
  longer.insert(longer.end() - 4, {1, 2, 3});
  EXPECT_NE(error_of(longer).find("3 unexpected bytes after the last section"), std::string::npos) << error_of(longer);
}

TEST(CheckpointFormat, SizesInTheFileAreNeverTrusted) {
  std::vector<uint8_t> b = serialize_checkpoint(small_checkpoint());
  // The first section's length (after magic 8, version 4, count 4, name length 4, "meta" 4).
  std::vector<uint8_t> huge = b;
  ASSERT_GT(huge.size(), 32u);
  std::fill(huge.begin() + 24, huge.begin() + 32, uint8_t{0xff});
  EXPECT_NE(error_of(with_fixed_crc(huge)).find("truncated: section 'meta' needs 18446744073709551615 bytes"),
            std::string::npos)
      << error_of(with_fixed_crc(huge));
  std::vector<uint8_t> sections = b;
  put_u32(sections, 12, 0x7fffffff);
  EXPECT_NE(error_of(with_fixed_crc(sections)).find("sections (at most 64)"), std::string::npos);
}

TEST(CheckpointFormat, MetadataProblemsNameTheField) {
  auto error_for = [](const Checkpoint& c) { return error_of(serialize_checkpoint(c)); };
  Checkpoint c = small_checkpoint();
  c.scenario.batch = 0;
  EXPECT_NE(error_for(c).find("its scenario is invalid: --batch must be at least 1"), std::string::npos) << error_for(c);
  c = small_checkpoint();
  c.step = 41;
  EXPECT_NE(error_for(c).find("metadata field 'step' is 41, out of range 0..40"), std::string::npos) << error_for(c);
  c = small_checkpoint();
  c.optimizer_state[0].name = "state.9.momentum_buffer";
  EXPECT_NE(error_for(c).find("optimizer state 'state.9.momentum_buffer' names no parameter"), std::string::npos);
  c = small_checkpoint();
  c.optimizer_state[0].shape = {1, 3};
  EXPECT_NE(error_for(c).find("has shape (1, 3), its parameter 0.bias (3,)"), std::string::npos) << error_for(c);
  c = small_checkpoint();
  c.scenario.topology = "a\nb";
  EXPECT_NE(error_for(c).find("'scenario.topology' contains a control character"), std::string::npos);
  c = small_checkpoint();
  c.scaler.erase("scale");
  EXPECT_NE(error_for(c).find("must be GradScaler.state_dict()"), std::string::npos);
  c = small_checkpoint();
  c.tallies.epoch_mean_loss.clear();
  EXPECT_NE(error_for(c).find("one mean loss per finished epoch (1)"), std::string::npos);
}

// A DDP checkpoint (rank 0's) keeps how the ranks shared the data; the fields are checked.
TEST(CheckpointFormat, DdpSharingRoundTripsAndIsChecked) {
  Checkpoint c = small_checkpoint(true);
  c.saved_by = "DistributedDataParallel";
  c.scenario.parallel = "ddp";
  c.scenario.nproc = 2;
  c.scenario.sampler_set_epoch = false;
  c.ddp = DdpCheckpointInfo{2, 2, true, 5, false, false, 2000};
  const std::vector<uint8_t> bytes = serialize_checkpoint(c);
  const Checkpoint r = parse_checkpoint(bytes.data(), bytes.size(), "mem");
  ASSERT_TRUE(r.ddp.has_value());
  EXPECT_EQ(r.ddp->world, 2);
  EXPECT_EQ(r.ddp->rank_batch, 2);
  EXPECT_TRUE(r.ddp->shuffle);
  EXPECT_EQ(r.ddp->seed, 5u);
  EXPECT_FALSE(r.ddp->drop_last);
  EXPECT_FALSE(r.ddp->set_epoch);
  EXPECT_EQ(r.ddp->padded_size, 2000);
  EXPECT_EQ(r.scenario.nproc, 2);
  EXPECT_FALSE(r.scenario.sampler_set_epoch);
  EXPECT_EQ(serialize_checkpoint(r), bytes);

  Checkpoint bad = c;
  bad.ddp->rank_batch = 3;  // 3 x 2 ranks is not the batch of 4
  EXPECT_NE(error_of(serialize_checkpoint(bad)).find("metadata field 'ddp.rank_batch' times ddp.world must be the "
                                                     "scenario's batch (4)"),
            std::string::npos)
      << error_of(serialize_checkpoint(bad));
  bad = c;
  bad.saved_by = "DataParallel";
  EXPECT_NE(error_of(serialize_checkpoint(bad)).find("'ddp' belongs to a checkpoint saved by DistributedDataParallel"),
            std::string::npos);
  // Older files have no 'ddp' and no scenario nproc: the defaults.
  const Checkpoint old = small_checkpoint();
  const std::vector<uint8_t> ob = serialize_checkpoint(old);
  EXPECT_FALSE(parse_checkpoint(ob.data(), ob.size(), "mem").ddp.has_value());
}

// AdamW's state per stepped parameter: step (a 0-dim tensor, as PyTorch 1.13's), exp_avg and
// exp_avg_sq, all three or none; the type must be the scenario's optimizer.
TEST(CheckpointFormat, AdamWStateRoundTripsAndIsChecked) {
  auto error_for = [](const Checkpoint& c) { return error_of(serialize_checkpoint(c)); };
  Checkpoint c = small_checkpoint();
  c.scenario.optimizer = "adamw";
  c.scenario.beta2 = 0.98f;
  c.scenario.clip_grad_norm = 2.5f;
  c.optimizer_type = "AdamW";
  c.optimizer_state = {{"state.1.step", {}, {6}}, {"state.1.exp_avg", {3}, {1, 2, 3}}, {"state.1.exp_avg_sq", {3}, {4, 5, 6}}};
  const std::vector<uint8_t> bytes = serialize_checkpoint(c);
  const Checkpoint r = parse_checkpoint(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(r.optimizer_type, "AdamW");
  EXPECT_EQ(r.scenario.optimizer, "adamw");
  EXPECT_EQ(r.scenario.beta2, 0.98f);
  EXPECT_FALSE(r.scenario.weight_decay.has_value());
  EXPECT_EQ(r.scenario.clip_grad_norm, std::optional<float>(2.5f));
  ASSERT_EQ(r.optimizer_state.size(), 3u);
  EXPECT_EQ(r.optimizer_state[0].name, "state.1.step");
  EXPECT_TRUE(r.optimizer_state[0].shape.empty());

  Checkpoint missing = c;
  missing.optimizer_state.pop_back();
  EXPECT_NE(error_for(missing).find("parameter 1 has 2 of the 3 optimizer state entries of AdamW"), std::string::npos)
      << error_for(missing);
  Checkpoint half_step = c;
  half_step.optimizer_state[0].values = {2.5f};
  EXPECT_NE(error_for(half_step).find("'state.1.step' must be a whole number of steps"), std::string::npos)
      << error_for(half_step);
  Checkpoint sgd_key = c;
  sgd_key.optimizer_state = {{"state.1.momentum_buffer", {3}, {1, 2, 3}}};
  EXPECT_NE(error_for(sgd_key).find("names no parameter (expected state.<0..3>.<step|exp_avg|exp_avg_sq> for AdamW)"),
            std::string::npos) << error_for(sgd_key);
  Checkpoint wrong_type = c;
  wrong_type.optimizer_type = "SGD";
  EXPECT_NE(error_for(wrong_type).find("'optimizer.type' must be \"AdamW\""), std::string::npos) << error_for(wrong_type);
}

// A checkpoint written before AdamW existed has no optimizer fields in its scenario: it is SGD,
// with no weight decay and no clipping, and loads as it did.
TEST(CheckpointFormat, ACheckpointFromBeforeAdamWLoadsAsSgd) {
  std::vector<uint8_t> b = serialize_checkpoint(small_checkpoint());
  const size_t length_at = 8 + 4 + 4 + 4 + 4;  // magic, version, count, name length, "meta"
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(b[length_at + static_cast<size_t>(i)]) << (8 * i);
  std::string meta(b.begin() + static_cast<std::ptrdiff_t>(length_at + 8), b.begin() + static_cast<std::ptrdiff_t>(length_at + 8 + n));
  nlohmann::json j = nlohmann::json::parse(meta);
  for (const char* key : {"optimizer", "weight_decay", "betas", "eps", "clip_grad_norm"}) {
    ASSERT_TRUE(j["scenario"].contains(key)) << key;
    j["scenario"].erase(key);
  }
  meta = j.dump(1);
  b.erase(b.begin() + static_cast<std::ptrdiff_t>(length_at + 8), b.begin() + static_cast<std::ptrdiff_t>(length_at + 8 + n));
  b.insert(b.begin() + static_cast<std::ptrdiff_t>(length_at + 8), meta.begin(), meta.end());
  for (int i = 0; i < 8; ++i) b[length_at + static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(meta.size()) >> (8 * i));
  b = with_fixed_crc(b);
  const Checkpoint r = parse_checkpoint(b.data(), b.size(), "old.ckpt");
  EXPECT_EQ(r.scenario.optimizer, "sgd");
  EXPECT_EQ(r.optimizer_type, "SGD");
  EXPECT_EQ(r.scenario.weight_decay_value(), 0.0f);
  EXPECT_FALSE(r.scenario.clip_grad_norm.has_value());
  ASSERT_EQ(r.optimizer_state.size(), 1u);
  EXPECT_EQ(r.optimizer_state[0].name, "state.1.momentum_buffer");
}

TEST(CheckpointFormat, AScalerStatePyTorchCouldNotHoldIsRefused) {
  auto error_for = [](const Checkpoint& c) { return error_of(serialize_checkpoint(c)); };
  for (double scale : {-1.0, 0.0, 1e308}) {  // 1e308 is inf as a float32: every step would be skipped
    Checkpoint c = small_checkpoint();
    c.scaler["scale"] = scale;
    EXPECT_NE(error_for(c).find("'scaler.scale' must be a positive finite float32"), std::string::npos) << error_for(c);
  }
  const std::vector<std::pair<std::pair<const char*, double>, const char*>> cases = {
      {{"growth_factor", 1.0}, "'scaler.growth_factor' must be > 1.0"},
      {{"backoff_factor", 1.0}, "'scaler.backoff_factor' must be in (0, 1)"},
      {{"backoff_factor", 0.0}, "'scaler.backoff_factor' must be in (0, 1)"},
      {{"growth_interval", 0}, "'scaler.growth_interval' must be a positive integer"},
      {{"_growth_tracker", 2000}, "'scaler._growth_tracker' must be below growth_interval"}};
  for (const auto& [change, message] : cases) {
    Checkpoint c = small_checkpoint();
    c.scaler[change.first] = change.second;
    EXPECT_NE(error_for(c).find(message), std::string::npos) << error_for(c);
  }
  EXPECT_EQ(error_for(small_checkpoint()), "");
}

TEST(CheckpointFormat, GarbageAfterTheMetadataJsonIsRefused) {
  // The meta section comes first: grow its payload by "\0garbage", fix its length and the CRC.
  std::vector<uint8_t> b = serialize_checkpoint(small_checkpoint());
  const size_t length_at = 8 + 4 + 4 + 4 + 4;  // magic, version, count, name length, "meta"
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(b[length_at + static_cast<size_t>(i)]) << (8 * i);
  const std::string junk("\0garbage", 8);
  b.insert(b.begin() + static_cast<std::ptrdiff_t>(length_at + 8 + n), junk.begin(), junk.end());
  for (int i = 0; i < 8; ++i) b[length_at + static_cast<size_t>(i)] = static_cast<uint8_t>((n + junk.size()) >> (8 * i));
  const std::string e = error_of(with_fixed_crc(b));
  EXPECT_NE(e.find("metadata is not valid JSON: a NUL byte at offset " + std::to_string(n)), std::string::npos) << e;
}

class CheckpointFile : public test::ScratchDir {};

TEST_F(CheckpointFile, SaveIsAtomicAndLeavesNoTemporary) {
  const std::string path = (dir_ / "run.ckpt").string();
  Checkpoint a = small_checkpoint();
  const size_t n = save_checkpoint(a, path);
  EXPECT_EQ(n, fs::file_size(path));
  auto files = [&] { return static_cast<int>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator())); };
  EXPECT_EQ(files(), 1) << "no temporary file is left";
  a.step = 9;
  save_checkpoint(a, path);
  EXPECT_EQ(read_checkpoint(path).step, 9);
  EXPECT_EQ(files(), 1);
  // Through a symlink: the target is replaced, the link stays.
  const std::string link = (dir_ / "link.ckpt").string();
  fs::create_symlink(path, link);
  a.step = 10;
  save_checkpoint(a, link);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_EQ(read_checkpoint(path).step, 10);
}

TEST_F(CheckpointFile, ReadAndWriteErrorsAreOneLine) {
  try {
    read_checkpoint((dir_ / "missing.ckpt").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.ckpt: cannot open: No such file or directory"), std::string::npos);
  }
  try {
    read_checkpoint(dir_.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos);
  }
  try {
    save_checkpoint(small_checkpoint(), (dir_ / "no" / "such" / "dir.ckpt").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot save checkpoint"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

// ---- keys -------------------------------------------------------------------------------------

const std::vector<std::string> kBare = {"0.weight", "0.bias", "2.weight", "2.bias"};
const std::vector<std::string> kWrapped = {"module.0.weight", "module.0.bias", "module.2.weight", "module.2.bias"};

TEST(StateDictKeys, SameKeysLoadAsTheyAre) {
  const KeyMatch m = match_state_dict_keys(kBare, kBare);
  EXPECT_TRUE(m.loadable);
  EXPECT_EQ(m.fix, KeyMatch::Fix::none);
  EXPECT_TRUE(m.missing.empty() && m.unexpected.empty());
  EXPECT_EQ(m.source_of.at("2.bias"), "2.bias");
}

TEST(StateDictKeys, DataParallelIntoBareModelStripsThePrefix) {
  const KeyMatch m = match_state_dict_keys(kWrapped, kBare);
  EXPECT_EQ(m.fix, KeyMatch::Fix::strip_module);
  EXPECT_TRUE(m.loadable);
  EXPECT_EQ(m.missing, kBare);       // what PyTorch reports
  EXPECT_EQ(m.unexpected, kWrapped);
  EXPECT_EQ(m.source_of.at("0.weight"), "module.0.weight");
  // PyTorch 1.13's text (torch/nn/modules/module.py), "\n\t" joined onto one line.
  EXPECT_EQ(load_state_dict_error("Sequential", {"0.weight", "0.bias"}, {"module.0.weight"}),
            "Error(s) in loading state_dict for Sequential: Missing key(s) in state_dict: \"0.weight\", "
            "\"0.bias\".  Unexpected key(s) in state_dict: \"module.0.weight\".");
  const std::vector<std::string> lines = explain_module_prefix(m, kWrapped, kBare, "Sequential");
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[0].find("module.0.weight, module.0.bias, module.2.weight, module.2.bias (4 keys)"), std::string::npos);
  EXPECT_NE(lines[1].find("0.weight, 0.bias, 2.weight, 2.bias (4 keys)"), std::string::npos);
  EXPECT_NE(lines[2].find("child `module`"), std::string::npos);
  EXPECT_NE(lines[3].find("Error(s) in loading state_dict for Sequential: Missing key(s)"), std::string::npos);
  EXPECT_NE(lines[4].find("removeprefix(\"module.\")"), std::string::npos);
}

TEST(StateDictKeys, BareIntoDataParallelAddsThePrefix) {
  const KeyMatch m = match_state_dict_keys(kBare, kWrapped);
  EXPECT_EQ(m.fix, KeyMatch::Fix::add_module);
  EXPECT_TRUE(m.loadable);
  EXPECT_EQ(m.source_of.at("module.2.weight"), "2.weight");
  const std::vector<std::string> lines = explain_module_prefix(m, kBare, kWrapped, "DataParallel");
  EXPECT_NE(lines[3].find("for DataParallel: Missing key(s) in state_dict: \"module.0.weight\""), std::string::npos);
  EXPECT_NE(lines[4].find("model.module.load_state_dict"), std::string::npos);
}

TEST(StateDictKeys, ADifferentModelIsNotLoadableEvenAfterTheFix) {
  // Saved by DataParallel with three layers, loaded into a bare two-layer model.
  const std::vector<std::string> deeper = {"module.0.weight", "module.0.bias", "module.2.weight", "module.2.bias",
                                           "module.4.weight", "module.4.bias"};
  const KeyMatch m = match_state_dict_keys(deeper, kBare);
  EXPECT_EQ(m.fix, KeyMatch::Fix::strip_module);
  EXPECT_FALSE(m.loadable);
  EXPECT_TRUE(m.residual_missing.empty());
  EXPECT_EQ(m.residual_unexpected, (std::vector<std::string>{"module.4.weight", "module.4.bias"}));
  EXPECT_EQ(size_mismatch_error("0.weight", {512, 784}, {256, 784}),
            "size mismatch for 0.weight: copying a param with shape torch.Size([512, 784]) from checkpoint, "
            "the shape in current model is torch.Size([256, 784]).");
}

// ---- resume: what the command line may change -------------------------------------------------

TEST(ResumeScenario, WhereAndHowFastMayChangeTheNumbersMayNot) {
  Scenario saved;
  saved.parallel = "dp";
  saved.device_ids = std::vector<int>{0, 1};
  saved.topology = "workstation-4x3090";
  saved.batch = 128;
  Scenario req;
  req.parallel = "none";
  req.workers = 3;
  req.batch = 128;
  req.env = {{"CUDA_VISIBLE_DEVICES", "1"}};
  const std::set<std::string> flags = {"--parallel", "--workers", "--batch"};
  const Scenario s = resume_scenario(saved, req, [&](const std::string& f) { return flags.count(f) > 0; });
  EXPECT_EQ(s.parallel, "none");
  EXPECT_FALSE(s.device_ids.has_value());  // a new mode starts from its own device_ids
  EXPECT_EQ(s.topology, "workstation-4x3090");  // not given: the checkpoint's
  EXPECT_EQ(s.workers, 3);
  EXPECT_EQ(s.env, req.env);  // the new process's own environment

  req.batch = 64;
  try {
    resume_scenario(saved, req, [&](const std::string& f) { return flags.count(f) > 0; });
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--batch 64 differs from the checkpoint's 128: --resume continues the saved run "
                           "(leave --batch out)");
  }
  // Not given: the checkpoint's value, whatever the command line's default was.
  EXPECT_EQ(resume_scenario(saved, req, [](const std::string&) { return false; }).batch, 128);
}

// DDP: the saved world size unless --nproc is given; another mode drops it; --no-set-epoch must
// agree with a DDP checkpoint.
TEST(ResumeScenario, DdpKeepsItsWorldSizeUnlessTold) {
  Scenario saved;
  saved.parallel = "ddp";
  saved.nproc = 4;
  saved.topology = "dgx-h100";
  Scenario req;
  std::set<std::string> flags;
  auto given = [&](const std::string& f) { return flags.count(f) > 0; };
  EXPECT_EQ(resume_scenario(saved, req, given).nproc, 4);
  req.nproc = 2;
  flags = {"--nproc"};
  EXPECT_EQ(resume_scenario(saved, req, given).nproc, 2);
  req.nproc = -1;
  req.parallel = "none";
  flags = {"--parallel"};
  const Scenario single = resume_scenario(saved, req, given);
  EXPECT_EQ(single.nproc, -1);
  EXPECT_NO_THROW(single.validate());
  req.parallel = "ddp";
  req.sampler_set_epoch = false;
  flags = {"--no-set-epoch"};
  try {
    resume_scenario(saved, req, given);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--no-set-epoch differs from the checkpoint"), std::string::npos) << e.what();
  }
}

// ---- host memory ------------------------------------------------------------------------------

TEST(HostMemory, EstimateCountsEveryDeviceUpToWhereItsGpuRunsOut) {
  Scenario sc;
  sc.batch = 256;
  const std::vector<int> sizes = {784, 4096, 4096, 10};
  const uint64_t p = (784ull * 4096 + 4096 + 4096ull * 4096 + 4096 + 4096ull * 10 + 10) * 4;  // one f32 copy
  const HostMemoryEstimate one = estimate_host_memory(sc, sizes, {{0, 1ull << 40}}, 0, false);
  EXPECT_GE(one.total(), 3 * p);  // parameters, gradients, momentum
  EXPECT_LT(one.total(), 3 * p + (64ull << 20));
  sc.parallel = "dp";
  const HostMemoryEstimate four =
      estimate_host_memory(sc, sizes, {{0, 1ull << 40}, {1, 1ull << 40}, {2, 1ull << 40}, {3, 1ull << 40}}, 0, false);
  EXPECT_GE(four.total(), 3 * p + 4 * 2 * p);  // plus a replica (copy and gradients) on each
  // A device whose GPU cannot hold it all stops the run at PyTorch's out-of-memory error: only the
  // allocations before that one are written. Here the first layer (12.25 MiB + 16 KiB) fits in
  // 20 MiB and the second weight (64 MiB) does not.
  sc.parallel = "none";
  const HostMemoryEstimate small = estimate_host_memory(sc, sizes, {{0, 20ull << 20}}, 0, false);
  EXPECT_EQ(small.total(), (784ull * 4096 + 4096) * 4 + 256ull * 785 * 4);
  EXPECT_NE(small.breakdown().find("until its GPU runs out of memory"), std::string::npos) << small.breakdown();
}

TEST(HostMemory, RefusesWithBothFiguresOnOneLine) {
  Scenario sc;
  const HostMemoryEstimate e = estimate_host_memory(sc, {784, 512, 512, 10}, {{0, 1ull << 40}}, 100ull << 20, true);
  EXPECT_NO_THROW(check_host_memory(e, {1ull << 40, "MemAvailable in /proc/meminfo", true}));
  try {
    check_host_memory(e, {50ull << 20, "MemAvailable in /proc/meminfo", true});
    FAIL();
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("this scenario needs about 1"), std::string::npos) << m;
    EXPECT_NE(m.find("this machine has 50.00 MiB available (MemAvailable in /proc/meminfo)"), std::string::npos) << m;
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
  EXPECT_GT(host_memory_available(), 0u);  // Linux: /proc/meminfo has MemAvailable
  EXPECT_GT(host_memory_resident(), 0u);
}

TEST(HostMemory, AnUnknownBudgetRefusesBigScenariosAndSaysWhy) {
  Scenario sc;
  const HostMemoryEstimate small = estimate_host_memory(sc, {784, 512, 10}, {{0, 1ull << 40}}, 50ull << 20, false);
  const HostMemoryEstimate big = estimate_host_memory(sc, {784, 16384, 16384, 10}, {{0, 1ull << 40}}, 50ull << 20, false);
  const HostMemoryBudget unknown{0, "unknown: /proc/meminfo has no MemAvailable", false};
  EXPECT_NO_THROW(check_host_memory(small, unknown));
  try {
    check_host_memory(big, unknown);
    FAIL() << "an unknown limit is not 'no limit'";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("how much this process may use is unknown: /proc/meminfo has no MemAvailable: "
                                           "scenarios over 1024.00 MiB are refused"),
              std::string::npos) << err.what();
  }
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  const char* name_;
  std::optional<std::string> old_;
};

TEST_F(CheckpointFile, TheBudgetIsTheSmallestOfMeminfoAndTheCgroupFromAFakeFolder) {
  std::ofstream(dir_ / "meminfo") << "MemTotal: 8000000 kB\nMemAvailable:    4194304 kB\n";
  ScopedEnv meminfo("FURNACE_MEMINFO", (dir_ / "meminfo").string());
  fs::create_directories(dir_ / "cg");
  ScopedEnv cgroup("FURNACE_CGROUP_DIR", (dir_ / "cg").string());
  HostMemoryBudget b = host_memory_budget();  // no cgroup files: MemAvailable, 4 GiB
  if (b.source.find("RLIMIT") != std::string::npos) GTEST_SKIP() << "a ulimit is set: " << b.source;
  EXPECT_TRUE(b.known);
  EXPECT_EQ(b.bytes, 4ull << 30);
  EXPECT_EQ(b.source, "MemAvailable in /proc/meminfo");
  std::ofstream(dir_ / "cg" / "memory.max") << "1073741824\n";  // v2: 1 GiB, 256 MiB used
  std::ofstream(dir_ / "cg" / "memory.current") << "268435456\n";
  b = host_memory_budget();
  EXPECT_EQ(b.bytes, 768ull << 20);
  EXPECT_NE(b.source.find("the cgroup's memory.max 1024.00 MiB minus its usage 256.00 MiB"), std::string::npos) << b.source;
  std::ofstream(dir_ / "cg" / "memory.max") << "max\n";  // no limit: MemAvailable again
  EXPECT_EQ(host_memory_budget().bytes, 4ull << 30);
  fs::remove(dir_ / "cg" / "memory.max");  // v1 files
  std::ofstream(dir_ / "cg" / "memory.limit_in_bytes") << "536870912\n";
  std::ofstream(dir_ / "cg" / "memory.usage_in_bytes") << "0\n";
  EXPECT_EQ(host_memory_budget().bytes, 512ull << 20);
  std::ofstream(dir_ / "meminfo") << "nothing useful\n";  // nothing readable at all: unknown
  fs::remove(dir_ / "cg" / "memory.limit_in_bytes");
  b = host_memory_budget();
  EXPECT_FALSE(b.known);
  EXPECT_NE(b.source.find("has no MemAvailable, no cgroup memory limit can be read"), std::string::npos) << b.source;
}

}  // namespace
}  // namespace furnace
