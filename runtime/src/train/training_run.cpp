// train/training_run: a Scenario as a small object. The constructor sets up (data, runtime, model,
// optimizer, loader, DataParallel, GradScaler, and a checkpoint's state when resuming); step() is
// one optimizer step (`accum` micro-steps of h2d -> forward under autocast -> loss -> backward of
// loss * scale / accum, on one device or through DataParallel, then the GradScaler's unscale /
// step / update and zero_grad); save() writes a checkpoint; finish() evaluates and reports.
// train() at the bottom is the loop the CLI, the visualizer and the lessons run.
// Not here: DataParallel's step (dp_training.cpp), the checkpoint format (checkpoint_*.cpp), the
// resume checks' data (training_state.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "furnace/amp.h"
#include "furnace/atomic_file.h"  // defines: FileLock
#include "furnace/checkpoint.h"   // defines: Checkpoint, save_checkpoint
#include "furnace/error.h"
#include "furnace/host_memory.h"  // defines: estimate_host_memory, check_host_memory
#include "furnace/loader.h"
#include "furnace/loading_cost.h"  // defines: loading_cost, batch_loading_seconds
#include "furnace/nn.h"
#include "furnace/phase_timer.h"  // defines: PhaseTimer
#include "furnace/process.h"  // defines: resolve_visibility, Environment
#include "furnace/scenario_options.h"  // defines: loader_options, scaler_options, autocast_dtype
#include "furnace/topology.h"
#include "furnace/train.h"
#include "furnace/ddp.h"           // defines: DistributedDataParallel
#include "train/ddp_ranks.h"       // defines: DdpRanks, RankSetup
#include "train/process_rank.h"    // defines: ProcessRank, launched_worker
#include "train/dp_training.h"     // defines: DpTraining
#include "train/training_data.h"   // defines: TrainingData, load_training_data
#include "train/loading_timeline.h"  // defines: LoadingTimeline
#include "train/training_state.h"  // defines: capture_model, load_model_and_optimizer
#include "train/ddp_resume.h"      // defines: check_resume_order, ddp_checkpoint_info

namespace furnace {
namespace {

// CRC32 of the epoch's sample order (int64 indices): the shuffle's outcome, compared on resume.
uint32_t order_checksum(const DataLoader& loader) { return indices_checksum(loader.epoch_order()); }

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// "[2, 3]"
std::string ids_list(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// The devices a run writes tensors on, with what each simulated GPU can hold: DataParallel's
// device_ids (device_ids[0] first; unset: every visible device), else the training device.
std::vector<std::pair<int, uint64_t>> used_devices(Runtime& rt, const Scenario& sc) {
  std::vector<int> ids;
  const bool dp = sc.parallel_mode() == ParallelMode::dp;
  if (dp && sc.device_ids) ids = *sc.device_ids;
  else if (dp) for (int d = 0; d < rt.device_count(); ++d) ids.push_back(d);
  else ids.push_back(sc.device);
  std::vector<std::pair<int, uint64_t>> out;
  for (int d : ids) {
    if (d < 0 || d >= rt.device_count()) continue;  // DataParallel names the bad id itself
    const GpuSpec& g = rt.backend().device_spec(d);
    out.emplace_back(d, g.memory_bytes - std::min(g.memory_bytes, g.context_bytes));
  }
  return out;
}

// The threads a run starts beside this one: the loader's workers and DataParallel's replicas.
int run_threads(Runtime& rt, const Scenario& sc) {
  const int replicas = sc.parallel_mode() != ParallelMode::dp ? 0
                       : sc.device_ids ? static_cast<int>(sc.device_ids->size()) : rt.device_count();
  return sc.workers + replicas;
}

// The process this run works in, as its first device use (just now) fixed it: the simulator's
// process hands over the visibility it froze; on a real GPU the rules' reading of the run's
// environment, with the driver's map.
ProcessRecord process_record(Runtime& rt, const Topology& topology, const Environment& env) {
  ProcessRecord p;
  p.topology = topology;
  p.environment = env;
  if (std::optional<Visibility> frozen = rt.backend().frozen_visibility()) {  // the simulator's own
    p.visibility = std::move(*frozen);
    return p;
  }
  // The driver read the environment (cuda): the rules' reading, with the driver's map where the
  // two disagree.
  p.visibility = resolve_visibility(topology.gpus, env);
  std::vector<int> map, read;
  for (int d = 0; d < rt.device_count(); ++d) map.push_back(rt.backend().physical_index(d));
  for (const VisibleDevice& v : p.visibility.devices) read.push_back(v.physical_index);
  if (map != read) {
    p.visibility.devices.clear();
    for (int d = 0; d < static_cast<int>(map.size()); ++d) p.visibility.devices.push_back({d, map[static_cast<size_t>(d)], ""});
  }
  return p;
}

// torch.optim.SGD(params, lr, momentum, weight_decay) or torch.optim.AdamW(params, lr, betas, eps,
// weight_decay), as the scenario says.
std::unique_ptr<Optimizer> make_optimizer(const Scenario& sc, std::vector<Parameter> params) {
  if (sc.optimizer_kind() == OptimizerKind::adamw)
    return std::make_unique<AdamW>(std::move(params), sc.lr, sc.beta1, sc.beta2, sc.eps, sc.weight_decay_value());
  return std::make_unique<SGD>(std::move(params), sc.lr, sc.momentum, sc.weight_decay_value());
}

double evaluate_accuracy(OpContext& ctx, MLP& model, const ImageDataset& test, int64_t batch) {
  DataLoader loader(test, batch, /*shuffle=*/false, /*drop_last=*/false, 0);
  Batch b;
  int64_t correct = 0;
  while (loader.next(b)) {
    Tensor x = Tensor::empty(ctx.rt, Device::cuda(ctx.device), {b.size, b.features});
    Tensor y = Tensor::empty(ctx.rt, Device::cuda(ctx.device), {b.size}, DType::i32);
    ops::copy_to_device(ctx, x, b.images.data());
    ops::copy_to_device(ctx, y, b.labels.data());
    Tensor logits = model.forward(ctx, x);
    correct += ops::accuracy_count(ctx, logits, y);
    model.release_activations();  // torch.no_grad(): nothing is kept for backward
  }
  return test.n > 0 ? static_cast<double>(correct) / static_cast<double>(test.n) : 0.0;
}

}  // namespace

// Everything a run holds, in the order it is built (and torn down in reverse: the loader's workers
// are joined and device memory released before the runtime goes).
struct TrainingRun::State {
  State(const Scenario& scenario, TraceBus& bus, const CheckpointOptions& checkpoints)
      : sc(scenario), trace(bus), ckpt(checkpoints), saving(!ckpt.path.empty()) {}

  const Scenario sc;
  TraceBus& trace;
  const CheckpointOptions ckpt;
  const bool saving;
  std::unique_ptr<FileLock> lock;  // on ckpt.path: no second run writes it meanwhile
  Topology topology;
  std::shared_ptr<const TrainingData> data;  // this run's, or the one every DDP rank shares
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<MLP> model;
  std::unique_ptr<Optimizer> optimizer;  // SGD or AdamW (Scenario::optimizer)
  CrossEntropyLoss criterion;
  std::unique_ptr<ImageDatasetView> train_view;
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<DpTraining> dp;  // --parallel dp: model = nn.DataParallel(model, ...)
  const RankSetup* rank = nullptr;  // --parallel ddp: this run is one rank
  std::unique_ptr<DistributedDataParallel> ddp;  // then: model = DDP(model, device_ids=[rank])
  // The device's busy seconds when training started and when it ended, before rank 0 alone
  // evaluates the test set (ddp's per-step report counts the training steps only).
  double busy_start = 0, busy_end = 0;
  std::unique_ptr<GradScaler> scaler;
  DType autocast = DType::f32;
  std::unique_ptr<PhaseTimer> phase;  // the single-device step's phases
  std::unique_ptr<LoadingTimeline> loading;  // the host's loading on the modelled clock (--loading)
  std::vector<int> gpus;                     // the devices the step runs on (waiting for data)

  TrainResult r;
  int64_t micro_per_epoch = 0, per_epoch = 0, total = 0;
  // The loop's position and tallies: a fresh start, or where the checkpoint left off.
  int first_epoch = 0;
  int64_t resume_batch = -1;  // the loader's position inside first_epoch, when resuming
  int epoch = 0;
  bool epoch_open = false;    // the loader is inside `epoch`
  double loss_sum = 0;
  int64_t in_epoch = 0;
  int64_t start_steps = 0, start_samples = 0;
  double clock_start = 0;
  std::chrono::steady_clock::time_point t0;
  Batch batch;

  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void note(const std::string& line) {
    r.checkpoint_notes.push_back(line);
    if (ckpt.on_note) ckpt.on_note(line);
  }
  void resume_from(const Checkpoint& c);
  uint32_t order_crc(int64_t of_epoch) const;
  float single_micro_step(float dloss, double* accuracy, bool sync);
  void close_epoch();
  DdpReport ddp_report(int64_t steps) const;
  double host_now() const;
  void wait_for_batch();
};

// The host's time on the modelled clock: it waited for the GPUs at the last micro-step's
// loss.item(), so it is the latest of their clocks.
double TrainingRun::State::host_now() const {
  double t = 0;
  for (int d : gpus) t = std::max(t, rt->backend().device_time(d));
  return t;
}

// The loop holds `batch` once the loader has produced it: until then the GPUs wait (--loading).
void TrainingRun::State::wait_for_batch() {
  if (!loading) return;
  const double ready = loading->ready(batch.index, batch.size, host_now());
  double waited = 0;
  for (int d : gpus) waited = std::max(waited, rt->backend().model_host_wait(d, 0, ready));
  r.data_wait_s += waited;
}

// The checkpoint's order_crc for this run at `of_epoch`: the DataLoader's order, or under DDP the
// sampler's whole order (the same on every rank and world size; train/ddp_resume.h).
uint32_t TrainingRun::State::order_crc(int64_t of_epoch) const {
  return rank ? sampler_order_checksum(sc, data->train.n, of_epoch) : order_checksum(*loader);
}

// Checks that `c` belongs to this run (schedule, position, data, shuffle; under DDP, or across
// modes, what train/ddp_resume.h allows), then loads the model, the optimizer, the scaler and the
// loop's tallies from it. Under DDP every rank does this from the same checkpoint (rank 0's).
void TrainingRun::State::resume_from(const Checkpoint& c) {
  const std::string& path = ckpt.resume_path;
  FURNACE_CHECK(sc.lr_schedule_mode() != LrSchedule::cosine || c.total_steps == total)
      << "checkpoint " << path << " belongs to a run of " << c.total_steps
      << " optimizer steps and this one has " << total << ": the cosine schedule's T_max was fixed "
      << "when that run started (resume with its --epochs/--steps, or extend runs that use "
         "--lr-schedule constant)";
  FURNACE_CHECK(c.step <= total)
      << "checkpoint " << path << " is at optimizer step " << c.step << ", past the end of this run ("
      << total << " steps)";
  FURNACE_CHECK(c.loader.dataset_size == data->train.n && c.loader.dataset_crc == data->crc)
      << "checkpoint " << path << " was trained on other data (" << c.loader.dataset_size
      << " images, CRC32 " << hex32(c.loader.dataset_crc) << "; " << data->dir << " has " << data->train.n
      << ", CRC32 " << hex32(data->crc) << "): a resumed run must draw the same samples";
  FURNACE_CHECK(c.loader.next_batch <= micro_per_epoch)
      << "checkpoint " << path << ": loader position " << c.loader.next_batch
      << " is past the end of an epoch of " << micro_per_epoch << " batches";
  const std::optional<DdpCheckpointInfo> sharing =
      rank ? std::optional<DdpCheckpointInfo>(ddp_checkpoint_info(sc, data->train.n, rank->world)) : std::nullopt;
  const ResumeOrder order = check_resume_order(c, sharing, micro_per_epoch, per_epoch, path);
  std::vector<std::string> notes;
  load_model_and_optimizer(*rt, *model, *optimizer, c, dp ? "DataParallel" : ddp ? "DistributedDataParallel" : "",
                           ckpt.strict_keys, path, notes);
  if (scaler->is_enabled()) {
    try {
      scaler->load_state_dict(c.scaler);
    } catch (const Error& e) {
      FURNACE_FAIL() << "checkpoint " << path << ": " << e.message();
    }
  }
  first_epoch = static_cast<int>(c.loader.epoch);
  resume_batch = c.loader.next_batch;
  loader->start_epoch(first_epoch, resume_batch);
  // The shuffle is a function of (seed, epoch): the same order proves the same RNG state.
  FURNACE_CHECK(!order.compare_order || order_crc(first_epoch) == c.loader.order_crc)
      << "checkpoint " << path << ": epoch " << first_epoch << "'s sample order differs from the saved "
      << "run's (CRC32 " << hex32(order_crc(first_epoch)) << " vs " << hex32(c.loader.order_crc) << ")";
  const RunTallies& t = c.tallies;
  r.steps = c.step;
  // A DDP rank counts its own samples: the same count on every rank.
  r.train_samples = t.train_samples * order.samples_per_rank_num / order.samples_per_rank_den;
  r.skipped_steps = t.skipped_steps;
  r.final_loss = t.last_loss;
  r.epoch_mean_loss = t.epoch_mean_loss;
  r.epochs = first_epoch;
  r.resumed_from_step = c.step;
  loss_sum = t.epoch_loss_sum;
  in_epoch = t.steps_in_epoch;
  note("resumed from " + path + ": optimizer step " + std::to_string(c.step) + " of " +
       std::to_string(total) + " (epoch " + std::to_string(first_epoch + 1) + ", batch " +
       std::to_string(resume_batch) + " of " + std::to_string(micro_per_epoch) + "), saved by " +
       (c.saved_by == "DataParallel"              ? "a DataParallel run"
        : c.saved_by == "DistributedDataParallel" ? "rank 0 of a DistributedDataParallel run"
                                                   : "a single-device run") +
       (scaler->is_enabled() ? ", GradScaler scale " + std::to_string(scaler->get_scale()) : std::string()));
  for (const std::string& line : notes) note(line);
  for (const std::string& line : order.notes) note(line);
}

// One micro-step on a single device, or on this rank's under DDP (whose backward all-reduces
// unless `sync` is false: model.no_sync()); returns the (unscaled) loss.
float TrainingRun::State::single_micro_step(float dloss, double* accuracy, bool sync) {
  const int64_t step = r.steps;
  const Device dev = Device::cuda(sc.device);
  OpContext ctx{*rt, sc.device, 0};
  phase->begin();
  Tensor x = Tensor::empty(*rt, dev, {batch.size, batch.features});
  Tensor y = Tensor::empty(*rt, dev, {batch.size}, DType::i32);
  ops::copy_to_device(ctx, x, batch.images.data(), batch.pinned);
  ops::copy_to_device(ctx, y, batch.labels.data(), batch.pinned);
  phase->end("h2d", step);
  phase->begin();
  OpContext amp_ctx{*rt, sc.device, 0, autocast};
  Tensor logits = ddp ? ddp->forward(amp_ctx, x) : model->forward(amp_ctx, x);
  phase->end("forward", step);
  phase->begin();
  const float loss = criterion.forward(ctx, logits, y);
  phase->end("loss", step);
  if (sc.track_accuracy)
    *accuracy = static_cast<double>(ops::accuracy_count(ctx, logits, y)) / static_cast<double>(batch.size);
  phase->begin();
  Tensor dlogits = criterion.backward(ctx, dloss);
  if (!ddp) {
    model->backward(ctx, dlogits);
  } else if (sync) {
    ddp->backward(ctx, dlogits);
  } else {
    DistributedDataParallel::NoSync no_sync(*ddp);
    ddp->backward(ctx, dlogits);
  }
  phase->end("backward", step);
  return loss;
}

// The end of an epoch (its last batch taken, or the run stopped inside it).
void TrainingRun::State::close_epoch() {
  epoch_open = false;
  r.epochs = epoch + 1;
  if (!r.stopped) r.epoch_mean_loss.push_back(in_epoch ? static_cast<float>(loss_sum / in_epoch) : 0.0f);
  ++epoch;
}

TrainingRun::TrainingRun(const Scenario& scenario, TraceBus& trace, const CheckpointOptions& ckpt) {
  scenario.validate();
  if (scenario.parallel_mode() == ParallelMode::ddp) {
    if (std::optional<WorkerEnv> worker = launched_worker(scenario))
      ranks_ = std::make_unique<ProcessRank>(scenario, trace, ckpt, std::move(*worker));
    else
      ranks_ = std::make_unique<DdpRanks>(scenario, trace, ckpt);
    return;
  }
  s_ = std::make_unique<State>(scenario, trace, ckpt);
  start(nullptr);
}

TrainingRun::TrainingRun(const Scenario& scenario, TraceBus& trace, const CheckpointOptions& ckpt,
                         const RankSetup& rank)
    : s_(std::make_unique<State>(scenario, trace, ckpt)) {
  start(&rank);
}

void TrainingRun::start(const RankSetup* rank) {
  State& s = *s_;
  const Scenario& sc = s.sc;
  const CheckpointOptions& ckpt = s.ckpt;
  TraceBus& trace = s.trace;
  s.rank = rank;
  sc.validate();
  const Checkpoint* resume = ckpt.resume;
  FURNACE_CHECK(ckpt.save_every >= 0) << "--save-every must be at least 1 (got " << ckpt.save_every << ")";
  if (s.saving) s.lock = std::make_unique<FileLock>(ckpt.path, "cannot save checkpoint " + printable(ckpt.path));
  s.topology = load_topology(sc.topology);
  s.data = rank ? rank->data : load_training_data(sc, s.saving || resume);

  // A rank on the simulator attaches to its machine; a rank with no machine (--backend cuda under
  // a launcher) makes the real backend, as a single run does, and trains on cuda:LOCAL_RANK
  // (sc.device, set by ProcessRank).
  s.rt = std::make_unique<Runtime>(rank && rank->machine ? rank->machine->attach(*rank->process, &trace)
                                                         : make_backend(sc.backend, s.topology, &trace, sc.env),
                                   trace);
  Runtime& rt = *s.rt;
  rt.init();  // the first device use: CUDA_VISIBLE_DEVICES is read now ("No CUDA GPUs are available")
  const ProcessRecord process = process_record(rt, s.topology, sc.env);
  trace.publish(process);  // what the visualizer draws
  // nn.DataParallel(model, device_ids=...) checks its ids (_check_balance) before the model moves
  // to device_ids[0]: an id beyond the visible devices is its "Invalid device id", not the
  // "invalid device ordinal" a model.cuda(id) would raise.
  if (sc.parallel_mode() == ParallelMode::dp && sc.device_ids)
    for (int id : *sc.device_ids)
      FURNACE_CHECK(id >= 0 && id < rt.device_count())  // DpTraining's words for the same check
          << "Invalid device id (device_ids " << ids_list(*sc.device_ids) << "; "
          << rt.describe_devices() << ")";
  FURNACE_CHECK(sc.device < rt.device_count())
      << "CUDA error: invalid device ordinal " << sc.device << ": " << rt.describe_devices() << "; inside the process "
      << existing_ordinals(rt.device_count());
  rt.set_device(sc.device);
  ops::set_allow_tf32(rt, sc.allow_tf32);
  OpContext ctx{rt, sc.device, 0};

  const std::vector<int> sizes = mlp_layer_sizes(sc, *s.data);
  // The simulator keeps every device's tensors in host RAM: refuse what this machine cannot hold
  // now, rather than be killed by the kernel halfway.
  if (rt.backend().host_accessible() && !rank)  // (DdpRanks checks for all its ranks)
    check_host_memory(estimate_host_memory(sc, sizes, used_devices(rt, sc), host_memory_resident(),
                                           s.saving || resume),
                      host_memory_budget(run_threads(rt, sc)));
  s.model = std::make_unique<MLP>(rt, sc.device, sizes);
  s.model->init_parameters(ctx, sc.seed);
  // DDP's constructor: rank 0's parameters to every rank, the first bucket.
  if (rank) s.ddp = std::make_unique<DistributedDataParallel>(rt, *s.model, *rank->group, DdpOptions{sc.bucket_cap_mb});
  s.optimizer = make_optimizer(sc, s.model->parameters());
  s.train_view = std::make_unique<ImageDatasetView>(s.data->train);
  s.loader = std::make_unique<DataLoader>(*s.train_view, rank ? rank_loader_options(sc, rank->rank, rank->world)
                                                              : loader_options(sc));
  if (sc.parallel_mode() == ParallelMode::dp) s.dp = std::make_unique<DpTraining>(rt, *s.model, sc, process);
  s.autocast = autocast_dtype(sc);
  s.scaler = std::make_unique<GradScaler>(scaler_options(sc));

  TrainResult& r = s.r;
  r.backend = rt.backend().name();
  r.clock_modelled = rt.backend().clock_is_modelled();
  // The simulator runs `topology`; a real backend runs on the GPU it has (the topology is unused).
  r.topology = rt.backend().host_accessible() ? s.topology.name : rt.backend().device_spec(sc.device).name;
  r.parameters = s.model->parameter_count();
  r.amp = sc.amp;
  r.accum = sc.accum;
  // Optimizer steps per epoch: every `accum` micro-batches, the last group possibly shorter. That
  // short group is stepped at the epoch's end (its loss still divided by accum), as the loop
  // `if (i + 1) % accum == 0 or i + 1 == len(loader)` does; PyTorch's AMP example, `if (i + 1) %
  // accum == 0` alone, would carry its gradients into the next epoch's first step instead.
  s.micro_per_epoch = s.loader->num_batches();
  s.per_epoch = (s.micro_per_epoch + sc.accum - 1) / sc.accum;
  s.total = s.per_epoch * sc.epochs;
  if (sc.max_steps > 0) s.total = std::min(s.total, sc.max_steps);

  if (resume) s.resume_from(*resume);
  s.start_steps = r.steps;
  s.start_samples = r.train_samples;
  FURNACE_CHECK(ckpt.stop_at_step < 0 || ckpt.stop_at_step > s.start_steps)
      << "--stop-at-step " << ckpt.stop_at_step << " is not after the checkpoint's step " << s.start_steps;
  s.epoch = s.first_epoch;
  s.phase = std::make_unique<PhaseTimer>(rt, std::vector<int>{sc.device});
  for (const auto& [d, bytes] : used_devices(rt, sc)) s.gpus.push_back(d);
  if (std::optional<LoadingCost> cost = loading_cost(sc.loading)) {
    const LoaderOptions lo = loader_options(sc);
    r.batch_loading_s = batch_loading_seconds(*cost, sc.batch);
    s.loading = std::make_unique<LoadingTimeline>(*cost, lo.num_workers, lo.prefetch_factor > 0 ? lo.prefetch_factor : 2);
  }
  s.clock_start = rt.backend().device_time(sc.device);
  s.busy_start = rt.backend().device_busy_time(sc.device);
  s.t0 = std::chrono::steady_clock::now();
}

TrainingRun::~TrainingRun() = default;

bool TrainingRun::done() const {
  if (ranks_) return ranks_->done();
  const State& s = *s_;
  return s.r.stopped || s.r.steps >= s.total || s.epoch >= s.sc.epochs;
}

int64_t TrainingRun::total_steps() const { return ranks_ ? ranks_->total_steps() : s_->total; }

std::optional<Progress> TrainingRun::step() {
  if (ranks_) return ranks_->step();
  State& s = *s_;
  const Scenario& sc = s.sc;
  TrainResult& r = s.r;
  Runtime& rt = *s.rt;
  TraceBus& trace = s.trace;
  while (!done()) {
    if (!s.epoch_open) {
      // A fresh epoch; a resumed run continues its first one where the checkpoint left off.
      if (s.epoch != s.first_epoch || s.resume_batch < 0) {
        s.loader->start_epoch(s.epoch);
        s.loss_sum = 0;
        s.in_epoch = 0;
      }
      if (s.loading) s.loading->start_epoch(s.host_now(), s.loader->position());
      s.epoch_open = true;
    }
    // CosineAnnealingLR with eta_min 0, T_max = total optimizer steps
    const float lr = sc.lr_schedule_mode() == LrSchedule::cosine
        ? static_cast<float>(0.5 * sc.lr * (1.0 + std::cos(M_PI * static_cast<double>(r.steps) / static_cast<double>(s.total))))
        : sc.lr;
    // Gradient accumulation: loss / accum on every micro-step, scaled by the GradScaler; the
    // gradients stay scaled and summed until the boundary.
    const float dloss = s.scaler->loss_scale() / (sc.accum_divide ? static_cast<float>(sc.accum) : 1.0f);
    float loss = 0;
    double accuracy = -1;
    int micro = 0;
    bool more = true;
    for (; micro < sc.accum && (more = s.loader->next(s.batch)); ++micro) {
      s.wait_for_batch();
      double acc = -1;
      float l = 0;
      if (s.dp) {
        const DpTraining::StepResult out =
            s.dp->micro_step(s.criterion, s.batch, dloss, s.autocast, sc.track_accuracy, r.steps);
        acc = out.accuracy;
        l = out.loss;
      } else {
        // Under DDP, no_sync() for every micro-batch but the group's last (accumulation).
        const bool last = micro + 1 == sc.accum || s.loader->position() == s.micro_per_epoch;
        l = s.single_micro_step(dloss, &acc, last);
      }
      loss += l;
      accuracy = acc;
      r.train_samples += s.batch.size;
      if (trace.active() && sc.accum > 1) {
        TraceEvent e;
        e.kind = EventKind::step;
        e.name = "micro_step";
        e.device = sc.device;
        e.start_s = rt.backend().device_time(sc.device);
        e.step = micro;
        e.value = l;
        trace.emit(e);
      }
    }
    if (micro == 0) {  // the epoch ended exactly at a boundary
      s.close_epoch();
      continue;
    }
    loss /= static_cast<float>(micro);

    // The boundary: with clipping, scaler.unscale_(optimizer) and clip_grad_norm_; then
    // scaler.step(optimizer) (unscale unless done, inf check, maybe skip), scaler.update(),
    // optimizer.zero_grad().
    bool stepped = true;
    float grad_norm = -1;
    auto optimizer_work = [&](OpContext& c) {
      s.optimizer->lr = lr;
      if (sc.clip_grad_norm) {
        s.scaler->unscale_(c, *s.optimizer);
        grad_norm = clip_grad_norm_(c, s.optimizer->parameters(), *sc.clip_grad_norm);
      }
      stepped = s.scaler->step(c, *s.optimizer);
      s.scaler->update();
      s.optimizer->zero_grad(c);
    };
    if (s.dp) {
      s.dp->optimizer_phase(r.steps, optimizer_work);
    } else {
      OpContext ctx{rt, sc.device, 0};
      s.phase->begin();
      optimizer_work(ctx);
      s.phase->end("optimizer", r.steps);
    }
    if (!stepped) ++r.skipped_steps;
    if (sc.clip_grad_norm) {
      r.last_grad_norm = grad_norm;
      if (!(grad_norm <= *sc.clip_grad_norm)) ++r.clipped_steps;  // NaN counts: its gradients were touched
    }
    if (trace.active() && s.scaler->is_enabled()) {  // GradScaler.update(): the new scale
      TraceEvent e;
      e.kind = EventKind::step;
      e.name = "scaler.update";
      e.device = sc.device;
      e.start_s = rt.backend().device_time(sc.device);
      e.step = r.steps;
      e.value = s.scaler->get_scale();
      trace.emit(e);
    }

    ++r.steps;
    ++s.in_epoch;
    r.final_loss = loss;
    s.loss_sum += loss;
    if (trace.active()) {
      TraceEvent e;
      e.kind = EventKind::step;
      e.name = stepped ? "step" : "step skipped (inf/NaN gradient)";
      e.device = sc.device;
      e.start_s = rt.backend().device_time(sc.device);
      e.step = r.steps;
      e.value = loss;
      trace.emit(e);
    }
    r.stopped = r.steps == s.ckpt.stop_at_step;
    if (s.ckpt.stop_requested && (r.stop_signal = s.ckpt.stop_requested()) != 0) r.stopped = true;
    if (s.saving && ((s.ckpt.save_every > 0 && r.steps % s.ckpt.save_every == 0) || r.steps == s.total || r.stopped))
      save();

    const double t = s.elapsed();
    const int64_t done_here = r.steps - s.start_steps;
    Progress p;
    p.epoch = s.epoch + 1;
    p.epochs = sc.epochs;
    p.step_in_epoch = s.in_epoch;
    p.steps_per_epoch = s.per_epoch;
    p.global_step = r.steps;
    p.total_steps = s.total;
    p.loss = loss;
    p.micro_batches = micro;
    p.grad_norm = grad_norm;
    p.accuracy = accuracy;
    p.samples_per_s = t > 0 ? static_cast<double>(r.train_samples - s.start_samples) / t : 0;
    p.eta_s = t / static_cast<double>(done_here) * static_cast<double>(s.total - r.steps);
    p.epoch_done = s.in_epoch == s.per_epoch || r.steps == s.total;
    p.loss_scale = s.scaler->get_scale();
    p.skipped_steps = r.skipped_steps;
    if (s.dp) {
      p.warnings = s.dp->warnings();
      p.imbalance = s.dp->imbalance();
    }
    // The epoch ends with the run, with a stop, or when its loader has nothing left.
    if (r.stopped || r.steps >= s.total || !more) s.close_epoch();
    return p;
  }
  return std::nullopt;
}

void TrainingRun::save() {
  if (ranks_) return ranks_->save();
  State& s = *s_;
  TrainResult& r = s.r;
  const auto t_save = std::chrono::steady_clock::now();
  Checkpoint c;
  c.scenario = s.sc;
  c.scenario.env.clear();
  c.step = r.steps;
  c.total_steps = s.total;
  c.save_every = s.ckpt.save_every;
  c.saved_by = s.dp ? "DataParallel" : s.ddp ? "DistributedDataParallel" : "Sequential";
  c.model = capture_model(*s.rt, *s.model, s.dp != nullptr || s.ddp != nullptr);
  c.optimizer_type = s.optimizer->type();
  c.optimizer_state = capture_optimizer_state(*s.rt, *s.optimizer);
  c.optimizer_steps = s.optimizer->step_count();
  c.scaler = s.scaler->state_dict();
  // The epoch the loop is in (after the last one: one past it, with the loader at its end).
  c.loader = {s.epoch, s.loader->position(), s.sc.seed, s.data->train.n, s.data->crc, s.order_crc(s.epoch)};
  if (s.rank) {  // rank 0 writes for every rank: how they shared the data (train/ddp_resume.h)
    c.ddp = ddp_checkpoint_info(s.sc, s.data->train.n, s.rank->world);
    c.scenario.nproc = s.rank->world;  // --resume keeps the world size unless --nproc says otherwise
  }
  c.tallies = {r.train_samples, r.skipped_steps, s.in_epoch, s.loss_sum, r.final_loss, r.epoch_mean_loss};
  r.checkpoint_bytes = save_checkpoint(c, s.ckpt.path);
  ++r.checkpoints_saved;
  r.last_checkpoint_step = r.steps;
  r.checkpoint_save_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_save).count();
}

// This rank's part of the DDP report (DdpRanks puts the ranks together).
DdpReport TrainingRun::State::ddp_report(int64_t steps) const {
  DdpReport d;
  d.world = rank->world;
  d.rank_batch = sc.batch / rank->world;
  d.bucket_cap_mb = sc.bucket_cap_mb;
  for (size_t b : ddp->bucket_bytes()) d.bucket_bytes.push_back(b);
  const DdpCommStats& st = ddp->stats();
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  d.allreduce_bytes_per_step = static_cast<uint64_t>(static_cast<double>(st.bytes) / n);
  d.sent_bytes_per_step = static_cast<uint64_t>(static_cast<double>(d.allreduce_bytes_per_step) * 2.0 *
                                                (d.world - 1) / d.world);
  d.step_s = r.modelled_step_s;
  DdpRankReport me;
  me.rank = rank->rank;
  me.device = sc.device;
  me.physical = rt->backend().physical_index(sc.device);
  me.busy_s = (busy_end - busy_start) / n;
  me.comm_s = st.comm_s / n;
  me.exposed_s = st.exposed_s / n;
  for (const DeviceMemoryReport& m : r.memory)
    if (m.device == sc.device) me.memory = m;
  d.ranks.push_back(me);
  d.notes.push_back("each rank's DataLoader: batch_size=" + std::to_string(d.rank_batch) + " (global batch " +
                    std::to_string(sc.batch) + " / " + std::to_string(d.world) + " ranks), through a "
                    "DistributedSampler: rank r takes samples r, r + " + std::to_string(d.world) + ", r + " +
                    std::to_string(2 * d.world) + ", ... of the epoch's order" +
                    (sc.sampler_set_epoch ? "" : "; set_epoch() is never called: every epoch repeats epoch 0's order"));
  return d;
}

TrainResult TrainingRun::finish() {
  if (ranks_) return ranks_->finish();
  State& s = *s_;
  const Scenario& sc = s.sc;
  TrainResult& r = s.r;
  Runtime& rt = *s.rt;
  if (s.epoch_open) s.close_epoch();  // a run ended by max_steps inside an epoch
  if (s.saving && r.last_checkpoint_step != r.steps) save();  // e.g. a run resumed at its end
  // Resumed from a checkpoint taken at the very end: its last epoch's mean is still open.
  if (s.ckpt.resume && r.steps == s.start_steps && s.in_epoch > 0 &&
      static_cast<int64_t>(r.epoch_mean_loss.size()) == s.first_epoch) {
    r.epochs = s.first_epoch + 1;
    r.epoch_mean_loss.push_back(static_cast<float>(s.loss_sum / s.in_epoch));
  }
  if (r.checkpoints_saved > 0) r.checkpoint_save_s /= static_cast<double>(r.checkpoints_saved);
  r.final_loss_scale = s.scaler->get_scale();
  r.wall_s = s.elapsed();
  const int64_t steps_here = r.steps - s.start_steps;
  r.samples_per_s = r.wall_s > 0 ? static_cast<double>(r.train_samples - s.start_samples) / r.wall_s : 0;
  r.modelled_s = s.dp ? s.dp->modelled_time() : rt.backend().device_time(sc.device);
  r.modelled_step_s = steps_here ? (r.modelled_s - s.clock_start) / static_cast<double>(steps_here) : 0.0;
  if (s.dp) r.dp = s.dp->report(steps_here);
  s.busy_end = rt.backend().device_busy_time(sc.device);
  // Evaluation runs the bare model (dp.module) where it lives (DataParallel on one device may
  // have moved it to device_ids[0]). A run stopped at --stop-at-step is not finished: no test.
  OpContext eval_ctx{rt, s.model->device(), 0, s.autocast};
  if (sc.evaluate && !r.stopped) r.test_accuracy = evaluate_accuracy(eval_ctx, *s.model, s.data->test, 1000);

  for (int d = 0; d < rt.device_count(); ++d) {
    const GpuSpec& g = rt.backend().device_spec(d);
    DeviceMemoryReport m;
    m.device = d;
    m.name = g.name;
    m.capacity_bytes = g.memory_bytes;
    // The context this process really made there (none on a device it never used), so that
    // context + reserved is what nvidia-smi shows for it.
    m.context_bytes = rt.backend().raw_allocator(d).process_overhead_bytes();
    m.allocated_bytes = rt.memory_allocated(d);
    m.reserved_bytes = rt.memory_reserved(d);
    m.peak_allocated_bytes = rt.max_memory_allocated(d);
    m.peak_reserved_bytes = rt.max_memory_reserved(d);
    r.memory.push_back(m);
  }
  if (s.ddp) r.ddp = s.ddp_report(steps_here);
  return r;
}

TrainResult train(const Scenario& sc, TraceBus& trace, const ProgressFn& on_progress,
                  const CheckpointOptions& ckpt) {
  TrainingRun run(sc, trace, ckpt);
  while (std::optional<Progress> p = run.step())
    if (on_progress) on_progress(*p);
  return run.finish();
}

}  // namespace furnace
