// furnace/checkpoint.h: the whole training state of a run on disk (`furnace train --checkpoint`,
// `--resume`): the model's state_dict, the optimizer's state (SGD's momentum buffers, AdamW's
// moments and step counts), the GradScaler's
// state_dict, the DataLoader's position, the run's counters and its Scenario; the file format
// (docs/checkpoint-format.md: magic, version, named sections, CRC32), its atomic write, and its
// reader, which trusts no size in the file (tests/fuzz/fuzz_checkpoint.cpp). Also PyTorch's
// load_state_dict key rules and DataParallel's "module." prefix (shared/reference/pitfalls.md 9).
// Not here: capturing and applying the state in the training loop (train/training_run.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "furnace/train.h"  // defines: Scenario

namespace furnace {

inline constexpr uint32_t kCheckpointVersion = 1;

// One tensor of a state_dict, on the host: f32, row-major.
struct StateTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Where the training data stood when the checkpoint was taken. The shuffle's generator is seeded
// from (seed, epoch) at every epoch, so (seed, epoch, next_batch) is the loader's whole RNG state;
// the checksums let a resumed run prove that it draws the same samples in the same order.
struct LoaderPosition {
  int64_t epoch = 0;         // 0-based epoch in progress
  int64_t next_batch = 0;    // batches of that epoch already consumed (DataLoader::position())
  uint64_t seed = 0;         // DataLoader's shuffle seed
  int64_t dataset_size = 0;  // training images
  uint32_t dataset_crc = 0;  // CRC32 of the training images and labels as read from disk
  uint32_t order_crc = 0;    // CRC32 of this epoch's sample order (int64 little-endian indices);
                             // under DDP the sampler's whole order before padding and striding
                             // (torch.randperm(N) seeded with seed + epoch): the same for any world
};

// What a --parallel ddp checkpoint (written by rank 0) adds: how the ranks shared the data, so that
// a resume can check it. Every rank's DataLoader had batch_size = rank_batch over
// DistributedSampler(num_replicas=world, rank, shuffle, seed, drop_last), whose order is padded to
// padded_size samples; `set_epoch` false: the loop never called sampler.set_epoch(epoch).
struct DdpCheckpointInfo {
  int world = 1;
  int64_t rank_batch = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  bool set_epoch = true;
  int64_t padded_size = 0;  // DistributedSampler's total_size: num_samples * world
};

// The run's tallies, so a resumed run reports what the uninterrupted one would have.
struct RunTallies {
  int64_t train_samples = 0;
  int64_t skipped_steps = 0;
  int64_t steps_in_epoch = 0;   // optimizer steps done in the epoch in progress
  double epoch_loss_sum = 0;    // sum of their losses
  float last_loss = 0;
  std::vector<float> epoch_mean_loss;  // of the epochs already finished
};

struct Checkpoint {
  Scenario scenario;        // the run's scenario (its CUDA environment is not kept: a new process
                            // takes its own)
  int64_t step = 0;         // optimizer steps done
  int64_t total_steps = 0;  // the run's length: CosineAnnealingLR's T_max
  int64_t save_every = 0;   // the run's --save-every, reused by --resume
  // Who produced the model's state_dict: "Sequential" (the bare model, keys "0.weight", ...),
  // "DataParallel" or "DistributedDataParallel" (rank 0; keys "module.0.weight", ...), as
  // torch.save(model.state_dict()) would.
  std::string saved_by = "Sequential";
  std::vector<StateTensor> model;
  // torch.optim's class name: "SGD" or "AdamW" (the scenario's optimizer).
  std::string optimizer_type = "SGD";
  // optimizer.state_dict()["state"]: "state.<i>.<key>" for parameter i of
  // param_groups[0]["params"], the keys of its optimizer (SGD: momentum_buffer; AdamW: step, a
  // 0-dim tensor as in PyTorch 1.13, exp_avg, exp_avg_sq); none for a parameter that has not
  // stepped yet. Keyed by index, as PyTorch's optimizer state is, so the "module." prefix never
  // touches it.
  std::vector<StateTensor> optimizer_state;
  int64_t optimizer_steps = 0;
  std::map<std::string, double> scaler;  // GradScaler.state_dict(); empty when fp16 is off
  LoaderPosition loader;   // under DDP: every rank's position (they step together)
  RunTallies tallies;      // under DDP: rank 0's (its samples, its losses)
  std::optional<DdpCheckpointInfo> ddp;  // saved_by "DistributedDataParallel" (absent in older files)
};

// The file's bytes (little-endian throughout), ending in the CRC32 of everything before it.
std::vector<uint8_t> serialize_checkpoint(const Checkpoint& ck);
// Parses and checks bytes from `origin` (a path, for messages). Every problem is one furnace::Error
// line starting "checkpoint <origin>: ": not a checkpoint (magic), an unsupported version,
// truncated, a checksum mismatch, a malformed section or metadata field, a scenario that does not
// validate. No size read from the file is trusted before it is checked against the bytes left.
Checkpoint parse_checkpoint(const uint8_t* data, size_t size, const std::string& origin);
Checkpoint read_checkpoint(const std::string& path);  // a missing file: "... cannot open: <errno>"

// Writes `ck` to `path` atomically: PATH.tmp is written, flushed and fsync'ed, renamed over PATH,
// and the folder is fsync'ed, so a crash or kill at any moment leaves either the previous file or
// the new one. Returns the bytes written.
size_t save_checkpoint(const Checkpoint& ck, const std::string& path);

// ---- state_dict keys: PyTorch's load_state_dict(strict=True) and the "module." prefix ----------

// How the keys of a saved state_dict meet a model's. `missing` and `unexpected` are what PyTorch's
// strict load_state_dict reports for the keys as they are (in the model's and the file's order).
// `fix` is the rename Furnace applies when exactly one side carries DataParallel's "module."
// prefix: strip it from every saved key (saved by DataParallel, loaded into the bare model) or add
// it (the other way). `residual_missing` / `residual_unexpected` remain after the fix; when both
// are empty the state_dict is `loadable` and `source_of[k]` is the saved key that loads into the
// model's key k.
struct KeyMatch {
  enum class Fix { none, strip_module, add_module };
  std::vector<std::string> missing, unexpected;
  Fix fix = Fix::none;
  std::vector<std::string> residual_missing, residual_unexpected;
  bool loadable = false;
  std::map<std::string, std::string> source_of;
};
KeyMatch match_state_dict_keys(const std::vector<std::string>& saved,
                               const std::vector<std::string>& model_keys);

// PyTorch's RuntimeError for a strict load, on one line ("\n\t" becomes " "):
// 'Error(s) in loading state_dict for <class_name>: Missing key(s) in state_dict: "0.weight", ... .
// Unexpected key(s) in state_dict: "module.0.weight", ... . size mismatch for ...', the parts in
// PyTorch's order (missing, unexpected, then the size mismatches).
std::string load_state_dict_error(const std::string& class_name, const std::vector<std::string>& missing,
                                  const std::vector<std::string>& unexpected,
                                  const std::vector<std::string>& size_errors = {});
// PyTorch's "size mismatch for <key>: copying a param with shape torch.Size([..]) from checkpoint,
// the shape in current model is torch.Size([..])."
std::string size_mismatch_error(const std::string& key, const std::vector<int64_t>& saved,
                                const std::vector<int64_t>& current);

// The lines a resumed run prints when the prefix had to be fixed: both key lists, the rule, what
// PyTorch would have raised, and what Furnace did (and the PyTorch fix). `model_class` is this
// run's ("Sequential", "DataParallel", "DistributedDataParallel"); `saved_by` the wrapper whose
// prefixed keys are stripped.
std::vector<std::string> explain_module_prefix(const KeyMatch& match,
                                               const std::vector<std::string>& saved,
                                               const std::vector<std::string>& model_keys,
                                               const std::string& model_class,
                                               const std::string& saved_by = "DataParallel");

// ---- resume: which options a resumed run may change --------------------------------------------

// The scenario of `furnace train --resume`: the checkpoint's, with the options given on the
// command line (`given(flag)`, e.g. given("--batch")) taken from `requested`. Options that only
// decide where and how fast it runs may change (topology, backend, devices, DataParallel, loader
// workers, evaluation), and --epochs / --steps (the trainer refuses a new length under the cosine
// schedule, whose T_max is fixed); --hidden may change and is then checked against the saved
// state_dict's shapes. Options that change the numbers (batch, lr, momentum, schedule, seed, amp,
// scaler, accumulation, TF32) must equal the checkpoint's: a different value is one clear line.
Scenario resume_scenario(const Scenario& saved, const Scenario& requested,
                         const std::function<bool(const std::string& flag)>& given);

}  // namespace furnace
