// furnace/train.h: a Scenario (the whole experiment) and the TrainingRun that runs it. The CLI, the
// visualizer and the lessons all run Scenarios.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "furnace/imbalance.h"  // defines: Imbalance
#include "furnace/trace.h"

namespace furnace {

// GradScaler's constructor arguments (furnace/amp.h), kept here so train.h needs no amp include.
struct GradScalerSettings {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// The modes a Scenario's text fields name, for the code that acts on them. The text is what users,
// lesson files and checkpoints write; it is parsed once, where it comes in (validate() names a bad
// one), and the rest of the code asks the enum.
enum class ParallelMode { none, dp, ddp };   // "none", "dp", "ddp"
enum class AmpMode { off, fp16, bf16 };  // "off", "fp16", "bf16"
enum class LrSchedule { constant, cosine };  // "constant", "cosine"
enum class OptimizerKind { sgd, adamw };     // "sgd", "adamw"
std::optional<ParallelMode> parse_parallel_mode(const std::string& text);
std::optional<AmpMode> parse_amp_mode(const std::string& text);
std::optional<LrSchedule> parse_lr_schedule(const std::string& text);
std::optional<OptimizerKind> parse_optimizer_kind(const std::string& text);

struct Scenario {
  std::string topology = "laptop-4060";  // name in data/topologies or a path to a .toml
  std::string backend = "sim";
  std::vector<int> hidden = {512, 512};  // hidden layer widths of the MLP (784-...-10)
  int epochs = 5;
  int64_t batch = 256;
  float lr = 0.1f;
  float momentum = 0.9f;
  // "sgd": torch.optim.SGD(lr, momentum, weight_decay); "adamw": torch.optim.AdamW(lr, betas=(beta1,
  // beta2), eps, weight_decay), decoupled weight decay.
  std::string optimizer = "sgd";
  std::optional<float> weight_decay;  // unset: the optimizer's default (SGD 0, AdamW 0.01)
  float beta1 = 0.9f, beta2 = 0.999f;  // AdamW's betas (PyTorch's defaults)
  float eps = 1e-8f;                   // AdamW's eps
  // torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) before each optimizer step (after
  // scaler.unscale_(optimizer) under fp16); unset: no clipping.
  std::optional<float> clip_grad_norm;
  std::string lr_schedule = "cosine";  // "constant", or "cosine": torch.optim.lr_scheduler.
                                       // CosineAnnealingLR(T_max = total steps), stepped per step
  uint64_t seed = 0;
  std::string data_dir;    // MNIST-format folder; empty: Debian's Fashion-MNIST
  int64_t max_steps = -1;  // stop after this many optimizer steps (benchmarks, tests); -1: all
  int device = 0;          // logical device ordinal to train on
  // The training process's environment as training reads it: CUDA_VISIBLE_DEVICES and
  // CUDA_DEVICE_ORDER (absent: not set), and a launcher's variables (furnace/launch_env.h). With the sim backend it decides which simulated GPUs the process sees and as which
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
  // "ddp": torch.nn.parallel.DistributedDataParallel, as torchrun --nproc-per-node N starts it: N
  // processes of one simulated machine (each its own Runtime, CUDA context and caching allocator,
  // on its own thread), rank r on cuda:r of the visible GPUs (LOCAL_RANK), its own
  // DistributedSampler share of the data. `batch` stays the global batch (as for "dp"): each
  // rank's DataLoader takes batch / N rows. Rank 0 logs, evaluates and writes checkpoints.
  int nproc = -1;               // ranks; -1: one per visible GPU
  double bucket_cap_mb = 25.0;  // DDP's bucket_cap_mb
  bool sampler_set_epoch = true;  // false: the loop forgets sampler.set_epoch(epoch)
  // Under a launcher (`furnace launch`, torchrun, mpirun, srun: RANK and WORLD_SIZE or their
  // equivalents in `env`), "ddp" makes this process one rank of the job instead: the ranks join
  // through rank 0's store at MASTER_ADDR:MASTER_PORT and all-reduce through Gloo.
  // init_process_group(timeout=): how long a rank waits for the others to join and in each
  // collective before it fails (PyTorch's default for Gloo is 30 minutes; a stopped peer is
  // noticed at once, a hung one after this).
  double dist_timeout_s = 60;
  // Mixed precision: "off", "fp16" (autocast to float16 with a GradScaler) or "bf16" (autocast to
  // bfloat16, no scaler needed: bf16 has fp32's range).
  std::string amp = "off";
  GradScalerSettings scaler;
  int accum = 1;            // micro-batches per optimizer step; each loss is divided by accum
  bool accum_divide = true; // false reproduces the article's snippet (no division): M times the lr
  int workers = 0;          // DataLoader num_workers
  int prefetch_factor = -1; // -1: None (2 per worker)
  bool pin_memory = false;  // pinned batches: host-to-device copies at pinned bandwidth
  // The host's loading time on the modelled clock (furnace/loading_cost.h): "off" (the GPU never
  // waits for data), "tensors" (a TensorDataset in memory) or "torchvision" (FashionMNIST with
  // ToTensor and Normalize). With 0 workers the GPU waits while each batch loads; workers load
  // ahead, in parallel with the GPU's steps.
  std::string loading = "off";
  bool track_accuracy = false;  // report each training batch's accuracy in Progress (one extra
                                // argmax kernel per step, as `(out.argmax(1) == y).sum()`)
  // Print a UserWarning on stderr when it is raised, as Python does (and Furnace's note under it);
  // false where the caller shows the warnings itself (a lesson step's results). Not saved.
  bool echo_warnings = true;
  bool allow_tf32 = false;  // torch.backends.cuda.matmul.allow_tf32: fp32 GEMMs on TF32 tensor
                            // cores (cuda backend; the simulator's GEMMs stay exact fp32)

  // Checks ranges; one clear line per problem (throws furnace::Error).
  void validate() const;
  // The modes, parsed; each throws validate()'s line for a text it does not know.
  ParallelMode parallel_mode() const;
  AmpMode amp_mode() const;
  LrSchedule lr_schedule_mode() const;
  OptimizerKind optimizer_kind() const;
  float weight_decay_value() const;  // weight_decay, or the optimizer's default
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
  std::vector<std::string> warning_notes;  // Furnace's line under each: which GPUs its numbers are
  std::optional<parallel::NamedGpu> warned_gpu;  // the GPU the imbalance warning says to exclude
};

// One rank of a DDP run (`--parallel ddp`): its GPU, its modelled time per optimizer step, and its
// memory there.
struct DdpRankReport {
  int rank = 0;
  int device = 0;    // cuda:N in the rank's process (LOCAL_RANK)
  int physical = 0;  // nvidia-smi's GPU number
  double busy_s = 0;       // kernels, copies and all-reduces per step (each rank's own GPU)
  double comm_s = 0;       // of which all-reduces (on the communication stream)
  double exposed_s = 0;    // all-reduce time the compute stream waited for at the end of backward
  double idle_s = 0;       // step_s - (busy_s - hidden all-reduce time): the GPU doing nothing
  DeviceMemoryReport memory;
};

// What DistributedDataParallel did in a run.
struct DdpReport {
  int world = 1;
  int64_t rank_batch = 0;            // each rank's DataLoader batch_size (batch / world)
  double bucket_cap_mb = 25;
  std::vector<uint64_t> bucket_bytes;  // the rebuilt buckets (all-reduce order)
  uint64_t allreduce_bytes_per_step = 0;  // the gradients every rank all-reduces per optimizer step
  uint64_t sent_bytes_per_step = 0;       // what each rank sends for it: 2(n-1)/n of that (ring)
  double step_s = 0;                 // modelled seconds per optimizer step (the slowest rank)
  double hidden_share = 0;           // of the all-reduce time, the share hidden behind backward
  std::vector<DdpRankReport> ranks;
  std::vector<std::string> notes;    // how the data and the batch are split, in words
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
  bool clock_modelled = true; // false on real GPUs: no model, wall clock is the measurement
  int64_t parameters = 0;
  std::vector<DeviceMemoryReport> memory;
  std::optional<DpReport> dp;  // set by --parallel dp
  std::optional<DdpReport> ddp;  // set by --parallel ddp
  std::string amp = "off";
  int accum = 1;
  int64_t skipped_steps = 0;           // fp16: optimizer steps skipped (inf/NaN gradients)
  double final_loss_scale = 1;
  double modelled_step_s = 0;          // modelled GPU seconds per optimizer step
  double data_wait_s = 0;              // modelled seconds the GPU waited for the host's batches
  double batch_loading_s = 0;          // modelled host seconds to load one full batch (0: "off")
  float last_grad_norm = -1;           // clip_grad_norm_: the last step's total norm (-1: no clipping)
  int64_t clipped_steps = 0;           // steps whose norm exceeded max_norm (the gradients were scaled down)
  // Checkpoints (CheckpointOptions): the step this run resumed from (-1: a fresh start), the
  // checkpoints it saved, the size and mean wall time of one save, and whether it ended at
  // stop_at_step (then it is not evaluated).
  int64_t resumed_from_step = -1;
  int64_t checkpoints_saved = 0;
  int64_t last_checkpoint_step = -1;
  uint64_t checkpoint_bytes = 0;
  double checkpoint_save_s = 0;
  bool stopped = false;
  int stop_signal = 0;  // the signal that stopped the run (CheckpointOptions::stop_requested), or 0
  std::vector<std::string> checkpoint_notes;  // what resuming found and did (CheckpointOptions::on_note)
};

struct Progress {
  int epoch = 0, epochs = 0;  // epoch is 1-based
  int64_t step_in_epoch = 0, steps_per_epoch = 0;
  int64_t global_step = 0, total_steps = 0;
  float loss = 0;
  float grad_norm = -1;   // clip_grad_norm_'s total norm before clipping; -1 without --clip-grad-norm
  int micro_batches = 0;  // in this optimizer step: accum, fewer for an epoch's last short group
  double accuracy = -1;  // this batch's training accuracy; -1 unless Scenario::track_accuracy
  double samples_per_s = 0;
  double eta_s = 0;
  bool epoch_done = false;
  double loss_scale = 1;        // GradScaler's scale (fp16), 1 otherwise
  int64_t skipped_steps = 0;    // optimizer steps skipped because of inf/NaN gradients so far
  // The UserWarnings raised so far (DataParallel's imbalance check), which Python prints on stderr
  // and a window shows beside the run.
  std::vector<std::string> warnings;
  // The imbalance warning's finding, so a window can say which GPUs its numbers are, in its
  // reader's language (furnace/imbalance.h).
  std::optional<parallel::Imbalance> imbalance;
};

using ProgressFn = std::function<void(const Progress&)>;

// Thrown by a progress callback to end a run early (the visualizer's restart): train() lets any
// exception from `on_progress` through, after releasing device memory and joining loader workers.
struct TrainingStopped : std::exception {
  const char* what() const noexcept override { return "training stopped"; }
};

// Parses "512,512" or "0,1,2,3": comma-separated integers, each an optional '-' and decimal
// digits that fit in an int (no "0,x", no empty item, no spaces or '+'). An empty text gives an
// empty list when `allow_empty`. Otherwise throws one line (control characters shown as \xNN):
// "<what>: '<text>' is not a comma-separated list of <noun_and_example>".
std::vector<int> parse_int_list(const std::string& text, const std::string& what,
                                const char* noun_and_example, bool allow_empty = false);

struct Checkpoint;  // furnace/checkpoint.h
struct RankSetup;   // train/ddp_ranks.h: one rank of a --parallel ddp run
class DdpJob;       // train/ddp_job.h: the ranks of a --parallel ddp run this process drives

// Saving and resuming the whole training state (`furnace train --checkpoint / --save-every /
// --resume / --stop-at-step`). Saves are atomic: a kill at any moment leaves the last good one.
struct CheckpointOptions {
  std::string path;          // where to save; empty: never
  int64_t save_every = 0;    // also after every N optimizer steps (0: only at the end of the run)
  const Checkpoint* resume = nullptr;  // continue from this state (read_checkpoint(resume_path))
  std::string resume_path;   // its file, for messages
  // Load the model's state_dict as PyTorch's strict load_state_dict does: a "module." prefix on
  // one side only is an error, not fixed (see explain_module_prefix).
  bool strict_keys = false;
  // End the run after this optimizer step, as a job's time limit would: saved there, not
  // evaluated; --resume continues it. -1: run to the end.
  int64_t stop_at_step = -1;
  // Polled after every optimizer step: a non-zero value (the signal that asked, e.g. SIGINT) ends
  // the run there as stop_at_step does: saved (when `path` is set), not evaluated.
  std::function<int()> stop_requested;
  std::function<void(const std::string&)> on_note;  // one line each: what resuming found and did
};

// One run of a Scenario as an object: set up, step, save, report.
//   TrainingRun run(scenario, trace);
//   while (std::optional<Progress> p = run.step()) show(*p);
//   TrainResult r = run.finish();
// Every event goes to `trace`, and once, at the run's first device use, its process
// (ProcessRecord: the machine and the frozen CUDA_VISIBLE_DEVICES map). Destroying a run at any point (an exception, a stop) joins its
// loader's workers and releases its device memory.
class TrainingRun {
 public:
  // Loads the data, builds the runtime, the model, the optimizer, the loader (and DataParallel and
  // the GradScaler where the scenario asks), and continues `checkpoints.resume` when set. Throws
  // furnace::Error, one line, for a scenario that cannot run; on the sim backend also for one that
  // needs more host memory than the process can have (furnace/host_memory.h). With a checkpoint
  // path it holds that file's lock (furnace/atomic_file.h) until it is destroyed.
  // With --parallel ddp the run starts its ranks (processes of one simulated machine, each a
  // TrainingRun of its own on its own thread) and steps them together; rank 0's progress is the
  // run's, with the samples of every rank.
  TrainingRun(const Scenario& scenario, TraceBus& trace, const CheckpointOptions& checkpoints = {});
  // One rank of a --parallel ddp run, as DdpRanks starts it.
  TrainingRun(const Scenario& scenario, TraceBus& trace, const CheckpointOptions& checkpoints,
              const RankSetup& rank);
  ~TrainingRun();
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // One optimizer step (`accum` micro-steps, then the optimizer), with the checkpoint its
  // CheckpointOptions ask for; nullopt once the run is done (its steps, its epochs, or
  // stop_at_step).
  std::optional<Progress> step();
  bool done() const;
  int64_t total_steps() const;
  // Writes the whole state to CheckpointOptions::path now (atomic: write, fsync, rename).
  void save();
  // Ends the run: the final checkpoint if one is due, the test accuracy (unless stopped at
  // stop_at_step), the per-device memory report. Call once.
  TrainResult finish();

 private:
  struct State;
  void start(const RankSetup* rank);
  std::unique_ptr<State> s_;
  std::unique_ptr<DdpJob> ranks_;  // --parallel ddp: the ranks this process drives
};

// Runs `scenario` to its end: a TrainingRun, `on_progress` after every step. `on_progress` may
// throw (TrainingStopped) to stop the run; it is called on the training thread.
TrainResult train(const Scenario& scenario, TraceBus& trace, const ProgressFn& on_progress = {},
                  const CheckpointOptions& checkpoints = {});

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
