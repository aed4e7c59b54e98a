// The training loop: load data, build the model on the device, and for every optimizer step run
// `accum` micro-steps (h2d -> forward under autocast -> loss -> backward of loss * scale / accum)
// on one device or through DataParallel, then the GradScaler's unscale / step / update and
// zero_grad at the boundary, reporting every phase to the trace.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <zlib.h>

#include "furnace/amp.h"
#include "furnace/checkpoint.h"   // defines: Checkpoint, save_checkpoint
#include "furnace/error.h"
#include "furnace/host_memory.h"  // defines: estimate_host_memory, check_host_memory
#include "furnace/loader.h"
#include "furnace/nn.h"
#include "furnace/topology.h"
#include "furnace/train.h"
#include "train/dp_training.h"     // defines: DpTraining
#include "train/training_state.h"  // defines: capture_model, load_model_and_optimizer

namespace furnace {
namespace {

constexpr int kClasses = 10;

ImageDataset load_split(const Scenario& sc, const std::string& dir, const char* prefix) {
  FURNACE_CHECK(!sc.data_dir.empty() || std::filesystem::exists(dir))
      << "Fashion-MNIST not found in " << dir
      << ": install it with 'apt-get install dataset-fashion-mnist', or pass --data DIR "
         "(a small slice ships in data/fashion-mnist)";
  return load_mnist_split(dir, prefix);
}

// transforms.Normalize with the training set's own mean and standard deviation (for
// Fashion-MNIST 0.2860 and 0.3530), applied to both splits.
void normalize_splits(ImageDataset& train_set, ImageDataset& test_set) {
  double sum = 0, sq = 0;
  for (float v : train_set.images) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(train_set.images.size());
  const double mean = sum / n;
  const double stdev = std::sqrt(std::max(sq / n - mean * mean, 1e-12));
  for (ImageDataset* ds : {&train_set, &test_set})
    for (float& v : ds->images) v = static_cast<float>((v - mean) / stdev);
}

// Reports the span between two readings of the device clock as a training phase.
class PhaseClock {
 public:
  PhaseClock(Runtime& rt, int device) : rt_(rt), device_(device) {}
  void begin() { start_ = rt_.backend().device_time(device_); }
  void end(const char* name, int64_t step) {
    if (!rt_.trace().active()) return;
    TraceEvent e;
    e.kind = EventKind::phase;
    e.name = name;
    e.device = device_;
    e.start_s = start_;
    e.dur_s = rt_.backend().device_time(device_) - start_;
    e.step = step;
    rt_.trace().emit(e);
  }

 private:
  Runtime& rt_;
  int device_;
  double start_ = 0;
};

// CRC32 of the training images and labels (the data's fingerprint in a checkpoint).
uint32_t dataset_checksum(const ImageDataset& ds) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  auto add = [&crc](const void* data, size_t bytes) {
    const auto* p = static_cast<const Bytef*>(data);
    for (size_t done = 0; done < bytes;) {
      const uInt n = static_cast<uInt>(std::min<size_t>(bytes - done, size_t{1} << 30));
      crc = ::crc32(crc, p + done, n);
      done += n;
    }
  };
  add(ds.images.data(), ds.images.size() * sizeof(float));
  add(ds.labels.data(), ds.labels.size() * sizeof(int32_t));
  return static_cast<uint32_t>(crc);
}

// CRC32 of the epoch's sample order (int64 indices): the shuffle's outcome, compared on resume.
uint32_t order_checksum(const DataLoader& loader) {
  const std::vector<int64_t> order = loader.epoch_order();
  std::vector<uint8_t> bytes;
  bytes.reserve(order.size() * 8);
  for (int64_t i : order)
    for (int b = 0; b < 8; ++b) bytes.push_back(static_cast<uint8_t>(static_cast<uint64_t>(i) >> (8 * b)));
  return static_cast<uint32_t>(::crc32(::crc32(0L, Z_NULL, 0), bytes.data(), static_cast<uInt>(bytes.size())));
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// The devices a run writes tensors on, with what each simulated GPU can hold: DataParallel's
// device_ids (device_ids[0] first; unset: every visible device), else the training device.
std::vector<std::pair<int, uint64_t>> used_devices(Runtime& rt, const Scenario& sc) {
  std::vector<int> ids;
  if (sc.parallel == "dp" && sc.device_ids) ids = *sc.device_ids;
  else if (sc.parallel == "dp") for (int d = 0; d < rt.device_count(); ++d) ids.push_back(d);
  else ids.push_back(sc.device);
  std::vector<std::pair<int, uint64_t>> out;
  for (int d : ids) {
    if (d < 0 || d >= rt.device_count()) continue;  // DataParallel names the bad id itself
    const GpuSpec& g = rt.backend().device_spec(d);
    out.emplace_back(d, g.memory_bytes - std::min(g.memory_bytes, g.context_bytes));
  }
  return out;
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

TrainResult train(const Scenario& sc, TraceBus& trace, const ProgressFn& on_progress,
                  const CheckpointOptions& ckpt) {
  sc.validate();
  const Checkpoint* resume = ckpt.resume;
  const bool saving = !ckpt.path.empty();
  FURNACE_CHECK(ckpt.save_every >= 0) << "--save-every must be at least 1 (got " << ckpt.save_every << ")";
  const Topology topology = load_topology(sc.topology);
  const std::string dir = sc.data_dir.empty() ? default_fashion_mnist_dir() : sc.data_dir;
  ImageDataset train_set = load_split(sc, dir, "train");
  ImageDataset test_set = sc.evaluate ? load_split(sc, dir, "t10k") : ImageDataset{};
  // The data's fingerprint, as read from disk: a resumed run must see the same samples.
  const uint32_t dataset_crc = saving || resume ? dataset_checksum(train_set) : 0;
  if (sc.normalize) normalize_splits(train_set, test_set);
  FURNACE_CHECK(sc.batch <= train_set.n)
      << "--batch " << sc.batch << " is larger than the training set (" << train_set.n
      << " images in " << dir << ")";

  Runtime rt(make_backend(sc.backend, topology, &trace, sc.env), trace);
  rt.init();  // the first device use: CUDA_VISIBLE_DEVICES is read now ("No CUDA GPUs are available")
  FURNACE_CHECK(sc.device < rt.device_count())
      << "invalid device ordinal " << sc.device << ": " << rt.describe_devices() << "; inside the process "
      << (rt.device_count() == 1 ? "only cuda:0 exists" : "only cuda:0.." + std::to_string(rt.device_count() - 1) + " exist");
  rt.set_device(sc.device);
  ops::set_allow_tf32(rt, sc.allow_tf32);
  OpContext ctx{rt, sc.device, 0};
  const Device dev = Device::cuda(sc.device);

  std::vector<int> sizes{train_set.rows * train_set.cols};
  sizes.insert(sizes.end(), sc.hidden.begin(), sc.hidden.end());
  sizes.push_back(kClasses);
  // The simulator keeps every device's tensors in host RAM: refuse what this machine cannot hold
  // now, rather than be killed by the kernel halfway.
  if (rt.backend().name() == std::string("sim"))
    check_host_memory(estimate_host_memory(sc, sizes, used_devices(rt, sc), host_memory_resident(),
                                           saving || resume),
                      host_memory_available());
  MLP model(rt, sc.device, sizes);
  model.init_parameters(ctx, sc.seed);
  SGD optimizer(model.parameters(), sc.lr, sc.momentum);
  CrossEntropyLoss criterion;
  LoaderOptions lo;
  lo.batch_size = sc.batch;
  lo.shuffle = true;
  lo.num_workers = sc.workers;
  lo.prefetch_factor = sc.prefetch_factor;
  lo.pin_memory = sc.pin_memory;
  lo.seed = sc.seed;
  ImageDatasetView train_view(train_set);
  DataLoader loader(train_view, lo);
  std::unique_ptr<DpTraining> dp;  // --parallel dp: model = nn.DataParallel(model, ...)
  if (sc.parallel == "dp") dp = std::make_unique<DpTraining>(rt, model, sc);

  // torch.autocast(dtype) around the forward; GradScaler for fp16 only (bf16 has fp32's range).
  const DType autocast = sc.amp == "fp16" ? DType::f16 : sc.amp == "bf16" ? DType::bf16 : DType::f32;
  GradScalerOptions so;
  so.init_scale = sc.scaler.init_scale;
  so.growth_factor = sc.scaler.growth_factor;
  so.backoff_factor = sc.scaler.backoff_factor;
  so.growth_interval = sc.scaler.growth_interval;
  so.enabled = sc.amp == "fp16";
  GradScaler scaler(so);

  TrainResult r;
  r.backend = rt.backend().name();
  // The simulator runs `topology`; a real backend runs on the GPU it has (the topology is unused).
  r.topology = rt.backend().host_accessible() ? topology.name : rt.backend().device_spec(sc.device).name;
  r.parameters = model.parameter_count();
  r.amp = sc.amp;
  r.accum = sc.accum;
  // Optimizer steps per epoch: every `accum` micro-batches, the last group possibly shorter.
  const int64_t micro_per_epoch = loader.num_batches();
  const int64_t per_epoch = (micro_per_epoch + sc.accum - 1) / sc.accum;
  int64_t total = per_epoch * sc.epochs;
  if (sc.max_steps > 0) total = std::min(total, sc.max_steps);

  // The loop's position and tallies: a fresh start, or where the checkpoint left off.
  int first_epoch = 0;
  int64_t resume_batch = -1;  // the loader's position inside first_epoch, when resuming
  double loss_sum = 0;
  int64_t in_epoch = 0;
  auto note = [&](const std::string& line) {
    r.checkpoint_notes.push_back(line);
    if (ckpt.on_note) ckpt.on_note(line);
  };
  if (resume) {
    const std::string& path = ckpt.resume_path;
    FURNACE_CHECK(sc.lr_schedule != "cosine" || resume->total_steps == total)
        << "checkpoint " << path << " belongs to a run of " << resume->total_steps
        << " optimizer steps and this one has " << total << ": the cosine schedule's T_max was fixed "
        << "when that run started (resume with its --epochs/--steps, or extend runs that use "
           "--lr-schedule constant)";
    FURNACE_CHECK(resume->step <= total)
        << "checkpoint " << path << " is at optimizer step " << resume->step << ", past the end of this run ("
        << total << " steps)";
    FURNACE_CHECK(resume->loader.dataset_size == train_set.n && resume->loader.dataset_crc == dataset_crc)
        << "checkpoint " << path << " was trained on other data (" << resume->loader.dataset_size
        << " images, CRC32 " << hex32(resume->loader.dataset_crc) << "; " << dir << " has " << train_set.n
        << ", CRC32 " << hex32(dataset_crc) << "): a resumed run must draw the same samples";
    FURNACE_CHECK(resume->loader.next_batch <= micro_per_epoch)
        << "checkpoint " << path << ": loader position " << resume->loader.next_batch
        << " is past the end of an epoch of " << micro_per_epoch << " batches";
    std::vector<std::string> notes;
    load_model_and_optimizer(rt, model, optimizer, *resume, dp != nullptr, ckpt.strict_keys, path, notes);
    if (scaler.is_enabled()) {
      try {
        scaler.load_state_dict(resume->scaler);
      } catch (const Error& e) {
        FURNACE_FAIL() << "checkpoint " << path << ": " << e.message();
      }
    }
    first_epoch = static_cast<int>(resume->loader.epoch);
    resume_batch = resume->loader.next_batch;
    loader.start_epoch(first_epoch, resume_batch);
    // The shuffle is a function of (seed, epoch): the same order proves the same RNG state.
    FURNACE_CHECK(order_checksum(loader) == resume->loader.order_crc)
        << "checkpoint " << path << ": epoch " << first_epoch << "'s sample order differs from the saved "
        << "run's (CRC32 " << hex32(order_checksum(loader)) << " vs " << hex32(resume->loader.order_crc) << ")";
    const RunTallies& t = resume->tallies;
    r.steps = resume->step;
    r.train_samples = t.train_samples;
    r.skipped_steps = t.skipped_steps;
    r.final_loss = t.last_loss;
    r.epoch_mean_loss = t.epoch_mean_loss;
    r.epochs = first_epoch;
    r.resumed_from_step = resume->step;
    loss_sum = t.epoch_loss_sum;
    in_epoch = t.steps_in_epoch;
    note("resumed from " + path + ": optimizer step " + std::to_string(resume->step) + " of " +
         std::to_string(total) + " (epoch " + std::to_string(first_epoch + 1) + ", batch " +
         std::to_string(resume_batch) + " of " + std::to_string(micro_per_epoch) + "), saved by " +
         (resume->saved_by == "DataParallel" ? "a DataParallel run" : "a single-device run") +
         (scaler.is_enabled() ? ", GradScaler scale " + std::to_string(scaler.get_scale()) : std::string()));
    for (const std::string& line : notes) note(line);
  }
  const int64_t start_steps = r.steps, start_samples = r.train_samples;
  FURNACE_CHECK(ckpt.stop_at_step < 0 || ckpt.stop_at_step > start_steps)
      << "--stop-at-step " << ckpt.stop_at_step << " is not after the checkpoint's step " << start_steps;

  // Saves the whole state at a step boundary (atomic: write, fsync, rename).
  int epoch = first_epoch;
  auto save = [&] {
    const auto t_save = std::chrono::steady_clock::now();
    Checkpoint c;
    c.scenario = sc;
    c.scenario.env.clear();
    c.step = r.steps;
    c.total_steps = total;
    c.save_every = ckpt.save_every;
    c.saved_by = dp ? "DataParallel" : "Sequential";
    c.model = capture_model(rt, model, dp != nullptr);
    c.momentum = capture_momentum(rt, optimizer);
    c.optimizer_steps = optimizer.step_count();
    c.scaler = scaler.state_dict();
    c.loader = {epoch, loader.position(), sc.seed, train_set.n, dataset_crc, order_checksum(loader)};
    c.tallies = {r.train_samples, r.skipped_steps, in_epoch, loss_sum, r.final_loss, r.epoch_mean_loss};
    r.checkpoint_bytes = save_checkpoint(c, ckpt.path);
    ++r.checkpoints_saved;
    r.last_checkpoint_step = r.steps;
    r.checkpoint_save_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_save).count();
  };

  PhaseClock phase(rt, sc.device);
  Batch batch;
  const double clock_start = rt.backend().device_time(sc.device);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  // One micro-step on a single device; returns the (unscaled) loss.
  auto single_micro_step = [&](float dloss, double* accuracy) {
    phase.begin();
    Tensor x = Tensor::empty(rt, dev, {batch.size, batch.features});
    Tensor y = Tensor::empty(rt, dev, {batch.size}, DType::i32);
    ops::copy_to_device(ctx, x, batch.images.data(), batch.pinned);
    ops::copy_to_device(ctx, y, batch.labels.data(), batch.pinned);
    phase.end("h2d", r.steps);
    phase.begin();
    OpContext amp_ctx{rt, sc.device, 0, autocast};
    Tensor logits = model.forward(amp_ctx, x);
    phase.end("forward", r.steps);
    phase.begin();
    const float loss = criterion.forward(ctx, logits, y);
    phase.end("loss", r.steps);
    if (sc.track_accuracy)
      *accuracy = static_cast<double>(ops::accuracy_count(ctx, logits, y)) / static_cast<double>(batch.size);
    phase.begin();
    Tensor dlogits = criterion.backward(ctx, dloss);
    model.backward(ctx, dlogits);
    phase.end("backward", r.steps);
    return loss;
  };

  bool more = true;
  for (epoch = first_epoch; epoch < sc.epochs && r.steps < total && !r.stopped; ++epoch) {
    if (epoch != first_epoch || resume_batch < 0) {
      loader.start_epoch(epoch);
      loss_sum = 0;
      in_epoch = 0;
    }
    more = true;
    while (r.steps < total && more) {
      // CosineAnnealingLR with eta_min 0, T_max = total optimizer steps
      const float lr = sc.lr_schedule == "cosine"
          ? static_cast<float>(0.5 * sc.lr * (1.0 + std::cos(M_PI * static_cast<double>(r.steps) / static_cast<double>(total))))
          : sc.lr;
      // Gradient accumulation: loss / accum on every micro-step, scaled by the GradScaler; the
      // gradients stay scaled and summed until the boundary.
      const float dloss = scaler.loss_scale() / (sc.accum_divide ? static_cast<float>(sc.accum) : 1.0f);
      float loss = 0;
      double accuracy = -1;
      int micro = 0;
      for (; micro < sc.accum && (more = loader.next(batch)); ++micro) {
        double acc = -1;
        const float l = dp ? [&] {
          const DpTraining::StepResult out =
              dp->micro_step(criterion, batch, dloss, autocast, sc.track_accuracy, r.steps);
          acc = out.accuracy;
          return out.loss;
        }()
                           : single_micro_step(dloss, &acc);
        loss += l;
        accuracy = acc;
        r.train_samples += batch.size;
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
      if (micro == 0) break;  // the epoch ended exactly at a boundary
      loss /= static_cast<float>(micro);

      // The boundary: scaler.step(optimizer) (unscale, inf check, maybe skip), scaler.update(),
      // optimizer.zero_grad().
      bool stepped = true;
      auto optimizer_work = [&](OpContext& c) {
        optimizer.lr = lr;
        stepped = scaler.step(c, optimizer);
        scaler.update();
        optimizer.zero_grad(c);
      };
      if (dp) {
        dp->optimizer_phase(r.steps, optimizer_work);
      } else {
        phase.begin();
        optimizer_work(ctx);
        phase.end("optimizer", r.steps);
      }
      if (!stepped) ++r.skipped_steps;
      if (trace.active() && scaler.is_enabled()) {  // GradScaler.update(): the new scale
        TraceEvent e;
        e.kind = EventKind::step;
        e.name = "scaler.update";
        e.device = sc.device;
        e.start_s = rt.backend().device_time(sc.device);
        e.step = r.steps;
        e.value = scaler.get_scale();
        trace.emit(e);
      }

      ++r.steps;
      ++in_epoch;
      r.final_loss = loss;
      loss_sum += loss;
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
      r.stopped = r.steps == ckpt.stop_at_step;
      if (saving && ((ckpt.save_every > 0 && r.steps % ckpt.save_every == 0) || r.steps == total || r.stopped))
        save();
      if (on_progress) {
        const double t = elapsed();
        const int64_t done_here = r.steps - start_steps;
        Progress p;
        p.epoch = epoch + 1;
        p.epochs = sc.epochs;
        p.step_in_epoch = in_epoch;
        p.steps_per_epoch = per_epoch;
        p.global_step = r.steps;
        p.total_steps = total;
        p.loss = loss;
        p.accuracy = accuracy;
        p.samples_per_s = t > 0 ? static_cast<double>(r.train_samples - start_samples) / t : 0;
        p.eta_s = t / static_cast<double>(done_here) * static_cast<double>(total - r.steps);
        p.epoch_done = in_epoch == per_epoch || r.steps == total;
        p.loss_scale = scaler.get_scale();
        p.skipped_steps = r.skipped_steps;
        on_progress(p);
      }
      if (r.stopped) break;
    }
    r.epochs = epoch + 1;
    if (!r.stopped) r.epoch_mean_loss.push_back(in_epoch ? static_cast<float>(loss_sum / in_epoch) : 0.0f);
  }
  if (saving && r.last_checkpoint_step != r.steps) save();  // e.g. a run resumed at its end
  // Resumed from a checkpoint taken at the very end: its last epoch's mean is still open.
  if (resume && r.steps == start_steps && in_epoch > 0 &&
      static_cast<int64_t>(r.epoch_mean_loss.size()) == first_epoch) {
    r.epochs = first_epoch + 1;
    r.epoch_mean_loss.push_back(static_cast<float>(loss_sum / in_epoch));
  }
  if (r.checkpoints_saved > 0) r.checkpoint_save_s /= static_cast<double>(r.checkpoints_saved);
  r.final_loss_scale = scaler.get_scale();
  r.wall_s = elapsed();
  const int64_t steps_here = r.steps - start_steps;
  r.samples_per_s = r.wall_s > 0 ? static_cast<double>(r.train_samples - start_samples) / r.wall_s : 0;
  r.modelled_s = dp ? dp->modelled_time() : rt.backend().device_time(sc.device);
  r.modelled_step_s = steps_here ? (r.modelled_s - clock_start) / static_cast<double>(steps_here) : 0.0;
  if (dp) r.dp = dp->report(steps_here);
  // Evaluation runs the bare model (dp.module) where it lives (DataParallel on one device may
  // have moved it to device_ids[0]). A run stopped at --stop-at-step is not finished: no test.
  OpContext eval_ctx{rt, model.device(), 0, autocast};
  if (sc.evaluate && !r.stopped) r.test_accuracy = evaluate_accuracy(eval_ctx, model, test_set, 1000);

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
  return r;
}

}  // namespace furnace
