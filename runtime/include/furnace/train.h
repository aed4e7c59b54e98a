// furnace/train.h: a Scenario (the whole experiment) and the Trainer that runs it. The CLI, the
// visualizer and the lessons all run Scenarios.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "furnace/trace.h"

namespace furnace {

// GradScaler's constructor arguments (furnace/amp.h), kept here so train.h needs no amp include.
struct GradScalerSettings {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct Scenario {
  std::string topology = "laptop-4060";  // name in data/topologies or a path to a .toml
  std::string backend = "sim";
  std::vector<int> hidden = {512, 512};  // hidden layer widths of the MLP (784-...-10)
  int epochs = 5;
  int64_t batch = 256;
  float lr = 0.1f;
  float momentum = 0.9f;
  std::string lr_schedule = "cosine";  // "constant", or "cosine": torch.optim.lr_scheduler.
                                       // CosineAnnealingLR(T_max = total steps), stepped per step
  uint64_t seed = 0;
  std::string data_dir;    // MNIST-format folder; empty: Debian's Fashion-MNIST
  int64_t max_steps = -1;  // stop after this many optimizer steps (benchmarks, tests); -1: all
  int device = 0;          // logical device ordinal to train on
  // The training process's CUDA environment: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER (absent:
  // not set). With the sim backend it decides which simulated GPUs the process sees and as which
  // cuda:N (furnace/visibility.h); `furnace train` fills it from its own environment and the
  // --visible/--order flags. With the cuda backend the variables given here are exported.
  std::map<std::string, std::string> env;
  bool evaluate = true;    // measure test accuracy at the end
  bool normalize = true;   // (x - mean) / std with the training set's statistics, as
                           // torchvision's transforms.Normalize((0.2860,), (0.3530,)) does
  // DataParallel: "none" trains on `device` alone; "dp" wraps the model in
  // torch.nn.DataParallel(model, device_ids, output_device). The model is built on `device`, which
  // must then be device_ids[0] (PyTorch's rule for several devices).
  std::string parallel = "none";
  std::optional<std::vector<int>> device_ids;  // relative to the visible devices; unset: all
  std::optional<int> output_device;            // unset: device_ids[0]
  // Mixed precision: "off", "fp16" (autocast to float16 with a GradScaler) or "bf16" (autocast to
  // bfloat16, no scaler needed: bf16 has fp32's range).
  std::string amp = "off";
  GradScalerSettings scaler;
  int accum = 1;            // micro-batches per optimizer step; each loss is divided by accum
  bool accum_divide = true; // false reproduces the article's snippet (no division): M times the lr
  int workers = 0;          // DataLoader num_workers
  int prefetch_factor = -1; // -1: None (2 per worker)
  bool pin_memory = false;  // pinned batches: host-to-device copies at pinned bandwidth
  bool track_accuracy = false;  // report each training batch's accuracy in Progress (one extra
                                // argmax kernel per step, as `(out.argmax(1) == y).sum()`)

  // Checks ranges; one clear line per problem (throws furnace::Error).
  void validate() const;
};

struct DeviceMemoryReport {
  int device = 0;
  std::string name;
  uint64_t capacity_bytes = 0;
  uint64_t context_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
};

// Modelled seconds per step one device spent busy (kernels and copies) in each part of a
// DataParallel step, and waiting for the others (idle).
struct DpDeviceTime {
  int device = 0;
  double scatter = 0, replicate = 0, compute = 0, gather = 0, reduce = 0, optimizer = 0;
  double busy = 0;  // the sum of the six
  double idle = 0;  // step_s - busy
};

// What DataParallel did in a run (`--parallel dp`).
struct DpReport {
  std::vector<int> device_ids;
  int output_device = 0;
  std::vector<int64_t> chunks;          // rows per replica for a full batch (torch.chunk)
  double step_s = 0;                    // modelled seconds per step (mean over the run)
  std::vector<DpDeviceTime> per_device; // device_ids, then output_device if not among them
  std::vector<std::string> notes;       // how the batch is split, in words
  std::vector<std::string> warnings;    // the UserWarnings DataParallel raised
};

struct TrainResult {
  std::string backend, topology;
  int epochs = 0;
  int64_t steps = 0;
  int64_t train_samples = 0;
  float final_loss = 0;
  std::vector<float> epoch_mean_loss;
  double test_accuracy = -1;  // -1: not evaluated
  double samples_per_s = 0;   // wall clock, training steps only
  double wall_s = 0;
  double modelled_s = 0;      // the modelled GPU clock at the end of training
  int64_t parameters = 0;
  std::vector<DeviceMemoryReport> memory;
  std::optional<DpReport> dp;  // set by --parallel dp
  std::string amp = "off";
  int accum = 1;
  int64_t skipped_steps = 0;           // fp16: optimizer steps skipped (inf/NaN gradients)
  double final_loss_scale = 1;
  double modelled_step_s = 0;          // modelled GPU seconds per optimizer step
};

struct Progress {
  int epoch = 0, epochs = 0;  // epoch is 1-based
  int64_t step_in_epoch = 0, steps_per_epoch = 0;
  int64_t global_step = 0, total_steps = 0;
  float loss = 0;
  double accuracy = -1;  // this batch's training accuracy; -1 unless Scenario::track_accuracy
  double samples_per_s = 0;
  double eta_s = 0;
  bool epoch_done = false;
  double loss_scale = 1;        // GradScaler's scale (fp16), 1 otherwise
  int64_t skipped_steps = 0;    // optimizer steps skipped because of inf/NaN gradients so far
};

using ProgressFn = std::function<void(const Progress&)>;

// Thrown by a progress callback to end a run early (the visualizer's restart): train() lets any
// exception from `on_progress` through, after releasing device memory and joining loader workers.
struct TrainingStopped : std::exception {
  const char* what() const noexcept override { return "training stopped"; }
};

// Parses "512,512" or "0,1,2,3": comma-separated integers, every item complete (no "0,x", no
// empty item). An empty text gives an empty list when `allow_empty`. Otherwise throws one line:
// "<what>: '<text>' is not a comma-separated list of <noun_and_example>".
std::vector<int> parse_int_list(const std::string& text, const std::string& what,
                                const char* noun_and_example, bool allow_empty = false);

// Runs `scenario`, reporting every event to `trace` and progress after every step. `on_progress`
// may throw (TrainingStopped) to stop the run; it is called on the training thread.
TrainResult train(const Scenario& scenario, TraceBus& trace, const ProgressFn& on_progress = {});

// A terminal progress bar: redraws one line in place on a TTY, prints one line per epoch otherwise.
class ProgressBar {
 public:
  explicit ProgressBar(std::FILE* out);
  void operator()(const Progress& p);
  void finish();

 private:
  std::FILE* out_;
  bool tty_;
  double last_draw_ = -1;
  bool drawn_ = false;
};

std::string format_duration(double seconds);  // "1:05", "1:02:03"

}  // namespace furnace
