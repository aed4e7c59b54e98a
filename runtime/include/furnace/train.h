// furnace/train.h: a Scenario (the whole experiment) and the Trainer that runs it. The CLI, the
// visualizer and the lessons all run Scenarios.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "furnace/trace.h"

namespace furnace {

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
  bool evaluate = true;    // measure test accuracy at the end
  bool normalize = true;   // (x - mean) / std with the training set's statistics, as
                           // torchvision's transforms.Normalize((0.2860,), (0.3530,)) does

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
};

struct Progress {
  int epoch = 0, epochs = 0;  // epoch is 1-based
  int64_t step_in_epoch = 0, steps_per_epoch = 0;
  int64_t global_step = 0, total_steps = 0;
  float loss = 0;
  double samples_per_s = 0;
  double eta_s = 0;
  bool epoch_done = false;
};

using ProgressFn = std::function<void(const Progress&)>;

// Runs `scenario`, reporting every event to `trace` and progress after every step.
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
