// `furnace train`: runs a Scenario with a live progress bar, then prints test accuracy and each
// device's memory; --json ends stdout with one JSON object; --trace writes a Chrome trace.
#include <algorithm>
#include <cmath>  // defines: std::isfinite
#include <cstdint>  // defines: UINT64_MAX
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <strings.h>  // defines: strcasecmp

#include <nlohmann/json.hpp>

#include "cli_helpers.h"  // defines: cuda_environment, parse_device_ids
#include "commands.h"
#include "text_table.h"  // defines: format_table
#include "furnace/allocator.h"
#include "furnace/backend.h"  // defines: nccl_built
#include "furnace/checkpoint.h"  // defines: read_checkpoint, resume_scenario
#include "furnace/error.h"
#include "furnace/data.h"       // defines: mnist_files, default_fashion_mnist_dir
#include "furnace/file_kind.h"  // defines: why_not_writable, same_file
#include "furnace/launch_env.h"  // defines: worker_env_from_environment, worker_variable_names
#include "furnace/op_table.h"  // defines: cpu_gemm_kernel
#include "furnace/process.h"  // defines: describe_cuda_environment
#include "furnace/stop_signals.h"  // defines: install_stop_signals, stop_signal
#include "furnace/topology.h"  // defines: load_topology
#include "furnace/train.h"

namespace furnace::cli {
namespace {

// A loss scale as GradScaler holds it (a float32): 65536, 0.75, 1.09951e+12 in full digits.
std::string scale_text(double scale) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", scale);
  return buf;
}

// What a launched DDP rank's gradients go through, before the run resolves --backend auto (which
// would touch CUDA before the run exports --visible): NCCL on GPUs, Gloo on the simulator.
const char* launched_ddp_transport(const std::string& backend) {
  const char* chosen = std::getenv("FURNACE_BACKEND");
  const std::string name = backend == "auto" && chosen && *chosen ? std::string(chosen) : backend;
  if (name == "sim" || !nccl_built()) return "Gloo";
  return name == "cuda" ? "NCCL" : "NCCL on GPUs, else Gloo";
}

struct TrainOptions {
  Scenario scenario;
  std::string hidden = "512,512";
  std::string trace_path;
  bool json = false;
  bool quiet = false;
  std::optional<std::string> visible, order;  // --visible, --order
  std::optional<std::string> device_ids;      // --device-ids, as typed
  std::optional<std::string> betas;           // --betas, as typed
  bool device_given = false;                  // --device on the command line
  // Checkpoints: --checkpoint, --save-every, --resume, --stop-at-step, --strict-keys.
  std::string checkpoint, resume;
  int64_t save_every = 0;
  int64_t stop_at_step = -1;
  bool strict_keys = false;
  std::function<bool(const std::string&)> given;  // whether a flag was on the command line

  const std::string& path_of(const std::string& flag) const {
    if (flag == "--resume") return resume;
    if (flag == "--checkpoint") return checkpoint;
    if (flag == "--trace") return trace_path;
    return scenario.data_dir;
  }
};

// Each device's process in the trace is named as the README shows it, "cuda:0 NVIDIA ...": the
// GPU the run reported for that ordinal (every device it used has a memory report).
void name_trace_devices(ChromeTraceWriter& writer, const TrainResult& r) {
  std::vector<std::string> names;
  for (const DeviceMemoryReport& m : r.memory) {
    if (m.device < 0) continue;
    const size_t d = static_cast<size_t>(m.device);
    if (names.size() <= d) names.resize(d + 1);
    names[d] = m.name;
  }
  writer.set_device_names(std::move(names));
}

// What a resumed run takes from its checkpoint and then looks up on this machine (the topology,
// the data folder): a failure there names the checkpoint, and the flag that overrides it.
void check_saved_places(const Scenario& sc, const std::string& path, const std::function<bool(const std::string&)>& given) {
  if (!given("--topology")) {
    try {
      load_topology(sc.topology);
    } catch (const Error& e) {
      FURNACE_FAIL() << "checkpoint " << printable(path) << ": its scenario's topology: " << e.message()
                     << " (--topology overrides it)";
    }
  }
  if (!given("--data") && !sc.data_dir.empty())
    FURNACE_CHECK(std::filesystem::is_directory(sc.data_dir))
        << "checkpoint " << printable(path) << ": its scenario's data folder " << printable(sc.data_dir)
        << " does not exist here (--data DIR overrides it)";
}

// The one line a run stopped by a signal ends with, and how to go on from there.
std::string stopped_line(const TrainResult& r, int64_t total, const std::string& path) {
  std::string line = std::string("stopped by ") + stop_signal_name(r.stop_signal) + " after step " +
                     std::to_string(r.steps) + " of " + std::to_string(total);
  if (path.empty()) return line + "; nothing saved (without --checkpoint PATH a stopped run cannot be resumed)";
  return line + "; checkpoint saved to " + printable(path) + ": continue with furnace train --resume " + printable(path);
}


// DataParallel's part of the summary: how the batch was split, and where each device's modelled
// time per step went (busy in each phase, idle waiting for the others).
void print_dp_summary(const DpReport& dp, bool real_gpus) {
  std::string ids, chunks;
  for (int d : dp.device_ids) ids += (ids.empty() ? "" : ", ") + std::to_string(d);
  for (int64_t c : dp.chunks) chunks += (chunks.empty() ? "" : ",") + std::to_string(c);
  std::printf("\nDataParallel: device_ids [%s], output_device cuda:%d, chunks %s\n", ids.c_str(),
              dp.output_device, chunks.c_str());
  for (const std::string& n : dp.notes) std::printf("  %s\n", n.c_str());
  if (real_gpus) {  // the per-device breakdown is the simulator's model; a GPU has its timeline
    std::printf("  per-device time on real GPUs: record a trace (--trace run.json) and open it in Perfetto\n");
    return;
  }
  std::printf("modelled time per step %.3f ms; per device (ms per step, busy in each phase, idle = waiting):\n",
              dp.step_s * 1e3);
  std::printf("  %-8s %9s %9s %9s %9s %9s %9s %9s %9s\n", "device", "scatter", "replicate", "compute",
              "gather", "reduce", "optimizer", "busy", "idle");
  const DpDeviceTime* top = nullptr;
  for (const DpDeviceTime& t : dp.per_device) {
    std::printf("  cuda:%-3d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", t.device, t.scatter * 1e3,
                t.replicate * 1e3, t.compute * 1e3, t.gather * 1e3, t.reduce * 1e3, t.optimizer * 1e3,
                t.busy * 1e3, t.idle * 1e3);
    if (!top || t.busy > top->busy) top = &t;
  }
  if (top && dp.per_device.size() > 1 && dp.step_s > 0) {
    double others = 0;
    for (const DpDeviceTime& t : dp.per_device) others += &t == top ? 0.0 : t.busy;
    others /= static_cast<double>(dp.per_device.size() - 1);
    std::printf("  cuda:%d is the busiest: %.0f%% of each step, the others %.0f%% on average "
                "(copies to and from cuda:%d hold its stream: broadcast, gather, reduce-add)\n",
                top->device, 100.0 * top->busy / dp.step_s, 100.0 * others / dp.step_s, dp.device_ids[0]);
  }
}

// What the ranks' peaks say about DDP's memory: every rank holds the same model, gradients,
// momentum and buckets; rank 0 alone evaluates the test set after training (a script's
// `if rank == 0:`), which may raise its peak, and says so rather than "the same".
std::string ddp_memory_words(const DdpReport& d, bool evaluated) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const DdpRankReport& r : d.ranks)
    if (r.rank != 0) {
      lo = std::min(lo, r.memory.peak_allocated_bytes);
      hi = std::max(hi, r.memory.peak_allocated_bytes);
    }
  const uint64_t first = d.ranks.empty() ? 0 : d.ranks.front().memory.peak_allocated_bytes;
  if (d.ranks.size() < 2 || (lo == hi && first == hi)) return "every GPU holds the same: no GPU 0 bottleneck";
  if (lo == hi && first > hi && evaluated)
    return "every GPU holds the same for training: no GPU 0 bottleneck (rank 0's peak is " +
           format_size(first - hi) + " higher: it alone evaluates the test set at the end, as `if rank == 0:` "
           "does; --no-eval leaves it out)";
  return "the GPUs' peaks range from " + format_size(std::min(lo, first)) + " to " + format_size(std::max(hi, first)) +
         " (torch.cuda.max_memory_allocated)";
}

// DistributedDataParallel's part of the summary: the ranks, the buckets, where each rank's GPU
// time per step went, and how much of the all-reduce hid behind backward.
void print_ddp_summary(const DdpReport& d, bool evaluated, int accum) {
  std::printf("\nDistributedDataParallel: %d rank%s (process%s), one per GPU, DataLoader batch_size %lld each\n",
              d.world, d.world == 1 ? "" : "s", d.world == 1 ? "" : "es", static_cast<long long>(d.rank_batch));
  for (const std::string& n : d.notes) std::printf("  %s\n", n.c_str());
  std::string buckets;
  for (uint64_t b : d.bucket_bytes) buckets += (buckets.empty() ? "" : ", ") + format_size(b);
  std::printf("  buckets (bucket_cap_mb=%g, the first capped at 1 MiB, all-reduced in this order): %s\n",
              d.bucket_cap_mb, buckets.c_str());
  std::printf("  per step each rank all-reduces %s of gradients (a ring sends 2(n-1)/n of it: %s per rank)\n",
              format_size(d.allreduce_bytes_per_step).c_str(), format_size(d.sent_bytes_per_step).c_str());
  if (accum > 1)
    std::printf("  --accum %d: the first %s of each step %s under model.no_sync() (gradients add up on each rank, "
                "no all-reduce); the last one's backward all-reduces the sum, once per step\n", accum,
                accum == 2 ? "micro-batch" : (std::to_string(accum - 1) + " micro-batches").c_str(),
                accum == 2 ? "runs" : "run");
  std::printf("modelled time per step %.3f ms; per rank (ms per step; all-reduce runs on its own stream, "
              "beside backward):\n", d.step_s * 1e3);
  std::vector<std::vector<std::string>> rows{{"rank", "GPU", "busy", "all-reduce", "exposed", "idle", "allocated", "reserved"}};
  auto ms = [](double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", s * 1e3);
    return std::string(b);
  };
  for (const DdpRankReport& r : d.ranks)
    rows.push_back({std::to_string(r.rank), "cuda:" + std::to_string(r.device) + " = GPU " + std::to_string(r.physical),
                    ms(r.busy_s), ms(r.comm_s), ms(r.exposed_s), ms(r.idle_s), format_size(r.memory.allocated_bytes),
                    format_size(r.memory.reserved_bytes)});
  std::printf("%s", format_table(rows, {.right = {true, false, true, true, true, true, true, true}, .gap = "  "}).c_str());
  std::printf("  %.0f%% of the all-reduce time is hidden behind backward (the rest: \"exposed\", the compute "
              "stream waiting at the end of backward); %s\n",
              100.0 * d.hidden_share, ddp_memory_words(d, evaluated).c_str());
}

void print_checkpoint_summary(const TrainResult& r, const std::string& path, int64_t save_every) {
  if (r.checkpoints_saved > 0)
    std::printf("  checkpoint      %lld saved to %s (%s; the last at step %lld; %s, %.1f ms each: "
                "written to a temporary file, fsync'ed, renamed)\n",
                static_cast<long long>(r.checkpoints_saved), path.c_str(),
                save_every > 0 ? ("every " + std::to_string(save_every) + " steps and at the end").c_str() : "at the end",
                static_cast<long long>(r.last_checkpoint_step), format_size(r.checkpoint_bytes).c_str(),
                1e3 * r.checkpoint_save_s);
  if (r.stopped)
    std::printf("  stopped         at step %lld (--stop-at-step), not evaluated: continue with "
                "furnace train --resume %s\n", static_cast<long long>(r.steps), path.c_str());
}

// The modelled throughput: samples per optimizer step over the modelled step time; 0 without a
// model (a real GPU) or a step.
double modelled_samples_per_s(const TrainResult& r, const Scenario& sc) {
  return r.clock_modelled && r.modelled_step_s > 0
             ? static_cast<double>(sc.batch) * sc.accum / r.modelled_step_s
             : 0.0;
}

// DataParallel's speed against one GPU: the same model, batch, dtype and accumulation trained on
// device_ids[0] alone for a few steps, bare (model.cuda()), on the same simulated machine and
// environment. nullopt on a real GPU, or when the batch does not fit one GPU (said in `why`).
std::optional<double> one_gpu_samples_per_s(const Scenario& sc, const TrainResult& r, std::string* why) {
  const bool ddp = r.ddp && r.ddp->world > 1;
  if (!r.clock_modelled || (!ddp && (!r.dp || r.dp->device_ids.size() < 2))) return std::nullopt;
  Scenario one = sc;
  one.parallel = "none";
  one.device_ids.reset();
  one.output_device.reset();
  one.nproc = -1;
  one.device = ddp ? 0 : r.dp->device_ids[0];
  one.epochs = 1;
  one.max_steps = 3;
  one.evaluate = false;
  TraceBus quiet;
  try {
    const TrainResult b = train(one, quiet, {}, CheckpointOptions{});
    const double v = modelled_samples_per_s(b, one);
    if (v > 0) return v;
  } catch (const Error& e) {
    *why = e.what();
  }
  return std::nullopt;
}

void print_summary(const TrainResult& r, const Scenario& sc, std::optional<double> one_gpu,
                   const std::string& one_gpu_why) {
  std::printf("\ntrained %lld steps (%d epoch%s) on %s [%s backend]%s\n",
              static_cast<long long>(r.steps), r.epochs, r.epochs == 1 ? "" : "s",
              r.topology.c_str(), r.backend.c_str(),
              r.resumed_from_step >= 0 ? (", resumed from step " + std::to_string(r.resumed_from_step)).c_str() : "");
  std::printf("  final loss      %.4f\n", r.final_loss);
  if (!std::isfinite(r.final_loss))
    std::printf("  diverged        the loss is no longer a number: the updates grew without bound (a "
                "learning rate too large for this run%s)\n",
                sc.accum > 1 && !sc.accum_divide ? "; the loss not divided by --accum multiplies it by "
                                                   "the number of micro-batches" : "");
  if (r.test_accuracy >= 0) std::printf("  test accuracy   %.4f\n", r.test_accuracy);
  const bool nothing_trained = r.resumed_from_step >= 0 && r.steps == r.resumed_from_step;
  if (nothing_trained) {
    // A finished run resumed: no step ran, so there is no speed to report.
    std::printf("  nothing to train: the checkpoint is at the run's last step (a run with --lr-schedule "
                "constant goes on with a larger --epochs; a cosine schedule's length is fixed)\n");
  } else if (!r.clock_modelled) {  // real GPUs: wall clock is the measurement; there is no model
    std::printf("  throughput      %.0f samples/s (wall clock, on the GPU)\n", r.samples_per_s);
  } else {
    // The kernel decides much of the speed: an AVX-512 CPU told "Haswell" runs the GEMMs at about half.
    // OPENBLAS_CORETYPE chose it only where OpenBLAS knew the name; otherwise it picked its own.
    const char* coretype = std::getenv("OPENBLAS_CORETYPE");
    const std::string kernel = cpu_gemm_kernel();
    std::string why;
    if (coretype && *coretype)
      why = strcasecmp(coretype, kernel.c_str()) == 0
                ? ", from OPENBLAS_CORETYPE"
                : ", its own pick: OpenBLAS did not take OPENBLAS_CORETYPE=" + printable_clipped(coretype, 40);
    std::printf("  throughput      %.0f samples/s (wall clock, this CPU, OpenBLAS's %s kernel%s%s)\n", r.samples_per_s,
                kernel.c_str(), why.c_str(), cpu_gemm_kernel_narrower_than_cpu() ? ", though this CPU has AVX-512" : "");
    std::printf("  modelled time   %.3f s on the simulated GPU (%.3f ms per optimizer step)\n",
                r.modelled_s, 1e3 * r.modelled_step_s);
    const double gpu = modelled_samples_per_s(r, sc);
    std::printf("  simulated GPU   %.0f samples/s (modelled: %lld samples per optimizer step in %.3f ms)\n",
                gpu, static_cast<long long>(sc.batch) * sc.accum, 1e3 * r.modelled_step_s);
    const char* how = r.ddp ? "DistributedDataParallel" : "DataParallel";
    const size_t gpus = r.ddp ? static_cast<size_t>(r.ddp->world) : r.dp ? r.dp->device_ids.size() : 1;
    const int first = r.dp ? r.dp->device_ids[0] : 0;
    if (one_gpu)
      std::printf("  vs one GPU      %.2fx: %s on %zu GPUs %.0f samples/s, cuda:%d alone %.0f "
                  "samples/s (the same global batch, modelled)\n",
                  gpu / *one_gpu, how, gpus, gpu, first, *one_gpu);
    else if (!one_gpu_why.empty())
      std::printf("  vs one GPU      not measured: the batch does not run on cuda:%d alone (%s)\n", first,
                  one_gpu_why.c_str());
  }
  if (r.amp != "off")
    std::printf("  mixed precision %s autocast%s\n", r.amp.c_str(),
                r.amp == "fp16" ? (", GradScaler: final scale " + scale_text(r.final_loss_scale) +
                                   ", " + std::to_string(r.skipped_steps) + " step(s) skipped (inf/NaN gradients)").c_str()
                                : " (no GradScaler: bf16 has fp32's exponent range)");
  if (r.accum > 1)
    std::printf("  accumulation    %d micro-batches per optimizer step\n", r.accum);
  // Off by default, so that the simulated GPU's figure is its kernels and copies only: the loading
  // costs are one CPU's and one Python's (docs/host-loading.md), an order of magnitude, and would
  // move every modelled figure by a guess about the learner's machine. Lesson 09 turns it on.
  if (r.clock_modelled && sc.loading == "off" && !nothing_trained)
    std::printf("  data loading    not on the modelled clock (--loading off): the GPU never waits for "
                "the host here; --loading tensors|torchvision adds it (lesson 09)\n");
  if (r.batch_loading_s > 0 && r.steps > 0 && !nothing_trained)
    std::printf("  data loading    %.3f ms of host time per batch (--loading %s); the GPU waited %.3f ms per "
                "optimizer step for it (%.0f%% of the step) with num_workers=%d\n",
                1e3 * r.batch_loading_s, sc.loading.c_str(), 1e3 * r.data_wait_s / static_cast<double>(r.steps),
                r.modelled_step_s > 0 ? 100.0 * r.data_wait_s / static_cast<double>(r.steps) / r.modelled_step_s : 0.0,
                sc.workers);
  if (sc.clip_grad_norm && !nothing_trained)
    std::printf("  clip_grad_norm_ max_norm %g: total gradient norm %g at the last step, %lld of %lld steps clipped\n",
                *sc.clip_grad_norm, r.last_grad_norm, static_cast<long long>(r.clipped_steps),
                static_cast<long long>(r.steps));
  std::printf("\nmemory (torch.cuda.memory_allocated / memory_reserved, and their peaks):\n");
  std::vector<std::vector<std::string>> rows{{"device", "name", "allocated", "reserved", "max_allocated", "max_reserved"}};
  for (const DeviceMemoryReport& m : r.memory)
    rows.push_back({"cuda:" + std::to_string(m.device), m.name, format_size(m.allocated_bytes),
                    format_size(m.reserved_bytes), format_size(m.peak_allocated_bytes), format_size(m.peak_reserved_bytes)});
  // The GPU's name comes from the topology file: a long or Chinese one widens its column.
  std::printf("%s", format_table(rows, {.right = {false, false, true, true, true, true}, .gap = " ",
                                        .min_width = {8, 30, 12, 12, 14, 14}}).c_str());
  std::printf("  (reserved >= allocated: the caching allocator keeps freed blocks for reuse; "
              "nvidia-smi shows reserved plus the CUDA context)\n");
  if (r.dp && r.dp->device_ids.size() > 1) {
    if (r.dp->output_device == r.dp->device_ids[0])
      std::printf("  (DataParallel: cuda:%d holds the master parameters, the summed gradients, the optimizer "
                  "state, the gathered outputs and the loss, besides its replica's activations)\n",
                  r.dp->device_ids[0]);
    else
      std::printf("  (DataParallel: cuda:%d holds the master parameters, the summed gradients and the "
                  "optimizer state; cuda:%d the gathered outputs and the loss)\n",
                  r.dp->device_ids[0], r.dp->output_device);
  }
  if (r.dp && !nothing_trained) print_dp_summary(*r.dp, !r.clock_modelled);
  if (r.ddp && !nothing_trained) print_ddp_summary(*r.ddp, r.test_accuracy >= 0, sc.accum);
}

nlohmann::json dp_json(const DpReport& dp) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DpDeviceTime& t : dp.per_device)
    devices.push_back({{"device", t.device}, {"scatter_s", t.scatter}, {"replicate_s", t.replicate},
                       {"compute_s", t.compute}, {"gather_s", t.gather}, {"reduce_s", t.reduce},
                       {"optimizer_s", t.optimizer}, {"busy_s", t.busy}, {"idle_s", t.idle}});
  return {{"device_ids", dp.device_ids}, {"output_device", dp.output_device}, {"chunks", dp.chunks},
          {"step_s", dp.step_s}, {"per_device", devices}, {"notes", dp.notes}, {"warnings", dp.warnings},
          {"warning_notes", dp.warning_notes}};
}

nlohmann::json ddp_json(const DdpReport& d) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const DdpRankReport& r : d.ranks)
    ranks.push_back({{"rank", r.rank}, {"device", r.device}, {"physical", r.physical}, {"busy_s", r.busy_s},
                     {"allreduce_s", r.comm_s}, {"exposed_s", r.exposed_s}, {"idle_s", r.idle_s},
                     {"allocated_bytes", r.memory.allocated_bytes}, {"reserved_bytes", r.memory.reserved_bytes},
                     {"peak_allocated_bytes", r.memory.peak_allocated_bytes}, {"context_bytes", r.memory.context_bytes}});
  return {{"world", d.world}, {"rank_batch", d.rank_batch}, {"bucket_cap_mb", d.bucket_cap_mb},
          {"bucket_bytes", d.bucket_bytes}, {"allreduce_bytes_per_step", d.allreduce_bytes_per_step},
          {"sent_bytes_per_step", d.sent_bytes_per_step}, {"step_s", d.step_s}, {"hidden_share", d.hidden_share},
          {"ranks", ranks}, {"notes", d.notes}};
}

nlohmann::json to_json(const TrainResult& r) {
  nlohmann::json mem = nlohmann::json::array();
  for (const DeviceMemoryReport& m : r.memory)
    mem.push_back({{"device", m.device},
                   {"name", m.name},
                   {"capacity_bytes", m.capacity_bytes},
                   {"context_bytes", m.context_bytes},
                   {"allocated_bytes", m.allocated_bytes},
                   {"reserved_bytes", m.reserved_bytes},
                   {"peak_allocated_bytes", m.peak_allocated_bytes},
                   {"peak_reserved_bytes", m.peak_reserved_bytes}});
  return {{"backend", r.backend},
          {"topology", r.topology},
          {"epochs", r.epochs},
          {"steps", r.steps},
          {"final_loss", r.final_loss},
          {"epoch_mean_loss", r.epoch_mean_loss},
          {"test_accuracy", r.test_accuracy >= 0 ? nlohmann::json(r.test_accuracy) : nlohmann::json()},
          {"samples_per_s", r.samples_per_s},
          {"wall_s", r.wall_s},
          {"modelled_s", r.modelled_s},
          {"parameters", r.parameters},
          {"amp", r.amp},
          {"accum", r.accum},
          {"skipped_steps", r.skipped_steps},
          {"final_loss_scale", r.final_loss_scale},
          {"modelled_step_s", r.modelled_step_s},
          {"memory", mem},
          {"dp", r.dp ? dp_json(*r.dp) : nlohmann::json()},
          {"ddp", r.ddp ? ddp_json(*r.ddp) : nlohmann::json()},
          {"checkpoint", nlohmann::json()}};
}

nlohmann::json checkpoint_json(const TrainResult& r, const std::string& path) {
  return {{"path", path},
          {"saved", r.checkpoints_saved},
          {"last_step", r.last_checkpoint_step},
          {"bytes", r.checkpoint_bytes},
          {"save_s", r.checkpoint_save_s},
          {"resumed_from_step", r.resumed_from_step >= 0 ? nlohmann::json(r.resumed_from_step) : nlohmann::json()},
          {"stopped", r.stopped},
          {"notes", r.checkpoint_notes}};
}

// "SGD lr 0.1 (cosine) momentum 0.9" or "AdamW lr 0.001 (cosine) betas (0.9, 0.999) eps 1e-08
// weight_decay 0.01", and the clipping when there is one.
std::string optimizer_text(const Scenario& sc) {
  char buf[256];
  if (sc.optimizer_kind() == OptimizerKind::adamw)
    std::snprintf(buf, sizeof buf, "AdamW lr %g (%s) betas (%g, %g) eps %g weight_decay %g", sc.lr,
                  sc.lr_schedule.c_str(), sc.beta1, sc.beta2, sc.eps, sc.weight_decay_value());
  else if (sc.weight_decay_value() > 0)
    std::snprintf(buf, sizeof buf, "SGD lr %g (%s) momentum %g weight_decay %g", sc.lr, sc.lr_schedule.c_str(),
                  sc.momentum, sc.weight_decay_value());
  else
    std::snprintf(buf, sizeof buf, "SGD lr %g (%s) momentum %g", sc.lr, sc.lr_schedule.c_str(), sc.momentum);
  std::string s = buf;
  if (sc.clip_grad_norm) {
    std::snprintf(buf, sizeof buf, ", clip_grad_norm_ max_norm %g", *sc.clip_grad_norm);
    s += buf;
  }
  return s;
}

std::string ids_text(const std::vector<int>& ids) {
  std::string s;
  for (int d : ids) s += (s.empty() ? "" : ",") + std::to_string(d);
  return s;
}

// "--betas 0.9,0.999": AdamW's (beta1, beta2).
void parse_betas(const std::string& text, Scenario& sc) {
  const size_t comma = text.find(',');
  size_t used1 = 0, used2 = 0;
  bool ok = comma != std::string::npos;
  try {
    if (ok) {
      sc.beta1 = std::stof(text.substr(0, comma), &used1);
      sc.beta2 = std::stof(text.substr(comma + 1), &used2);
      ok = used1 == comma && used2 == text.size() - comma - 1;
    }
  } catch (const std::exception&) {
    ok = false;
  }
  FURNACE_CHECK(ok) << "--betas: '" << printable(text) << "' is not two numbers beta1,beta2 (e.g. 0.9,0.999)";
}

void run(const TrainOptions& o) {
  // Ctrl-C, SIGTERM, SIGHUP: the step in flight finishes, the checkpoint is saved, then one line.
  install_stop_signals();
  Scenario sc = o.scenario;
  sc.hidden = parse_int_list(o.hidden, "--hidden", "layer widths (e.g. 512,512)");
  sc.env = cuda_environment(o.visible, o.order);
  // A launcher's variables (furnace launch, torchrun, mpirun, srun): with --parallel ddp this
  // process is then one rank of the job.
  for (const std::string& name : worker_variable_names())
    if (const char* v = std::getenv(name.c_str())) sc.env[name] = v;
  if (const char* v = std::getenv("GLOO_SOCKET_IFNAME")) sc.env["GLOO_SOCKET_IFNAME"] = v;
  if (o.device_ids) sc.device_ids = parse_device_ids(*o.device_ids);
  if (o.betas) parse_betas(*o.betas, sc);
  // torch.optim.AdamW's default lr (1e-3) when --lr is not given: SGD's 0.1 would make Adam diverge.
  if (!o.given("--lr") && sc.optimizer == "adamw") sc.lr = 1e-3f;

  // --resume: the checkpoint's scenario, with what the command line may change; saving goes on
  // to the same file every --save-every steps as before, unless told otherwise.
  CheckpointOptions ck;
  std::unique_ptr<Checkpoint> saved;
  ck.path = o.checkpoint;
  ck.save_every = o.save_every;
  ck.stop_at_step = o.stop_at_step;
  ck.strict_keys = o.strict_keys;
  FURNACE_CHECK(!o.given("--save-every") || o.save_every >= 1) << "--save-every must be at least 1 (got " << o.save_every << ")";
  // -1 is how the scenario says "not given" (every step; prefetch_factor None): typed, it is as
  // wrong as -3.
  FURNACE_CHECK(!o.given("--steps") || sc.max_steps >= 1) << "--steps must be at least 1 (got " << sc.max_steps << ")";
  FURNACE_CHECK(!o.given("--prefetch-factor") || sc.prefetch_factor >= 1)
      << "--prefetch-factor must be at least 1 (got " << sc.prefetch_factor << ")";
  FURNACE_CHECK(!o.given("--stop-at-step") || o.stop_at_step >= 1) << "--stop-at-step must be at least 1 (got " << o.stop_at_step << ")";
  FURNACE_CHECK(!o.strict_keys || !o.resume.empty()) << "--strict-keys needs --resume PATH";
  // An empty path would otherwise mean "not given": the run would go on without what was asked.
  for (const char* flag : {"--resume", "--checkpoint", "--trace", "--data"})
    FURNACE_CHECK(!o.given(flag) || !o.path_of(flag).empty()) << flag << ": the path is empty";
  if (!o.resume.empty()) {
    saved = std::make_unique<Checkpoint>(read_checkpoint(o.resume));
    sc = resume_scenario(saved->scenario, sc, o.given);
    check_saved_places(sc, o.resume, o.given);
    ck.resume = saved.get();
    ck.resume_path = o.resume;
    if (ck.path.empty()) ck.path = o.resume;
    if (!o.given("--save-every")) ck.save_every = saved->save_every;
  }
  FURNACE_CHECK(!ck.path.empty() || !o.given("--save-every")) << "--save-every needs --checkpoint PATH";
  FURNACE_CHECK(!ck.path.empty() || o.stop_at_step < 0) << "--stop-at-step needs --checkpoint PATH (to continue from)";
  // model.cuda(device_ids[0]) before wrapping, unless --device says otherwise (then DataParallel
  // checks it, as PyTorch does).
  if (parse_parallel_mode(sc.parallel) == ParallelMode::dp && sc.device_ids && !sc.device_ids->empty() && !o.device_given)
    sc.device = std::max(0, sc.device_ids->front());
  // DDP's own flags mean nothing to another mode: refused, as --nproc is (the scenario cannot
  // tell a default from a value typed, nor -1 from "one per visible GPU").
  FURNACE_CHECK(!o.given("--nproc") || sc.nproc >= 1) << "--nproc must be at least 1 (got " << sc.nproc << ")";
  if (sc.parallel_mode() != ParallelMode::ddp)
    for (const char* flag : {"--bucket-cap-mb", "--no-set-epoch", "--dist-timeout"})
      FURNACE_CHECK(!o.given(flag)) << flag << " needs --parallel ddp";
  sc.validate();
  // Under a launcher only rank 0 speaks (the script's `if rank == 0:`): the others train silently
  // and say only why they failed.
  std::optional<WorkerEnv> worker;
  if (sc.parallel_mode() == ParallelMode::ddp)
    worker = worker_env_from_environment([&](const char* name) -> const char* {
      const auto it = sc.env.find(name);
      return it == sc.env.end() ? nullptr : it->second.c_str();
    });
  // Under a launcher the world size is the launcher's: a resumed checkpoint's own --nproc (its
  // saved world) gives way to it, as --nproc N does in one process; the resume then checks what
  // the new world size can restore.
  if (worker && saved && !o.given("--nproc")) sc.nproc = -1;
  const bool silent = worker && worker->rank != 0;
  const bool quiet = o.quiet || silent;
  const bool json = o.json && !silent;
  // Where the run will write, checked before it starts rather than when it ends.
  if (!o.trace_path.empty()) {
    const std::string why = why_not_writable(o.trace_path);
    FURNACE_CHECK(why.empty()) << "cannot write trace file '" << printable(o.trace_path) << "': " << printable(why);
  }
  if (!ck.path.empty()) {
    const std::string why = why_not_writable(ck.path);
    FURNACE_CHECK(why.empty()) << "cannot save checkpoint " << printable(ck.path) << ": " << printable(why);
  }
  // Nor may what the run writes replace what it reads, or each other: a trace written over the
  // checkpoint it resumed from, or a checkpoint over a dataset file, loses them without a word.
  // (Saving back to the --resume checkpoint is how a resumed run goes on: allowed.)
  if (!o.trace_path.empty() && !ck.path.empty())
    FURNACE_CHECK(!same_file(o.trace_path, ck.path))
        << "--trace and " << (o.checkpoint.empty() ? "--resume" : "--checkpoint") << " name the same file "
        << printable(o.trace_path) << ": the trace would replace the checkpoint";
  if (!o.trace_path.empty() && !o.resume.empty())
    FURNACE_CHECK(!same_file(o.trace_path, o.resume))
        << "--trace names the --resume checkpoint " << printable(o.resume) << ": the trace would replace it";
  const std::string data_dir = sc.data_dir.empty() ? default_fashion_mnist_dir() : sc.data_dir;
  for (const std::string& data_file : mnist_files(data_dir)) {
    if (!o.trace_path.empty())
      FURNACE_CHECK(!same_file(o.trace_path, data_file))
          << "--trace " << printable(o.trace_path) << " is a dataset file of --data: the trace would replace it";
    if (!ck.path.empty())
      FURNACE_CHECK(!same_file(ck.path, data_file))
          << "--checkpoint " << printable(ck.path) << " is a dataset file of --data: the checkpoint would replace it";
  }
  std::string widths;
  for (int w : sc.hidden) widths += (widths.empty() ? "" : "-") + std::to_string(w);

  TraceBus bus;
  std::unique_ptr<ChromeTraceWriter> writer;
  if (!o.trace_path.empty() && !silent) writer = std::make_unique<ChromeTraceWriter>(bus);

  ProgressBar bar(stderr);
  ProgressFn progress;
  if (!quiet) progress = [&bar](const Progress& p) { bar(p); };
  // The machine: the simulated topology, or this machine's GPUs where auto or cuda picks them
  // (resolved as the run will, its environment exported first). DDP's ranks pick their own
  // backend (ddp_ranks, a launched rank), so their line keeps the topology.
  const bool on_gpus = !quiet && !json && !worker && sc.parallel_mode() != ParallelMode::ddp &&
                       sc.backend != "sim" && resolve_backend_name(sc.backend, sc.env) == "cuda" &&
                       cuda_device_count() > 0;
  if (!quiet && !json)
    std::printf("furnace train: MLP 784-%s-10, batch %lld, %s, %d epoch%s%s, %s, %s\n",
                widths.c_str(), static_cast<long long>(sc.batch), optimizer_text(sc).c_str(), sc.epochs,
                sc.epochs == 1 ? "" : "s",
                sc.max_steps > 0 ? (" (at most " + std::to_string(sc.max_steps) + (sc.max_steps == 1 ? " step" : " steps") +
                                       ": --steps)").c_str() : "",
                on_gpus ? "this machine's GPUs (cuda backend)" : ("topology " + sc.topology).c_str(),
                sc.parallel_mode() == ParallelMode::ddp ? "rank r on cuda:r" : ("device cuda:" + std::to_string(sc.device)).c_str());
  if (!quiet && !json && (sc.amp_mode() != AmpMode::off || sc.accum > 1 || sc.workers > 0 || sc.pin_memory))
    std::printf("  amp %s, accumulation %d (effective batch %lld%s), DataLoader(num_workers=%d, "
                "pin_memory=%s)\n",
                sc.amp.c_str(), sc.accum, static_cast<long long>(sc.batch) * sc.accum,
                sc.accum > 1 && !sc.accum_divide ? ", loss NOT divided: effectively lr x accum" : "",
                sc.workers, sc.pin_memory ? "True" : "False");
  if (!quiet && !json && sc.parallel_mode() == ParallelMode::dp)
    std::printf("  model = nn.DataParallel(model, device_ids=%s%s)\n",
                sc.device_ids ? ("[" + ids_text(*sc.device_ids) + "]").c_str() : "None (every visible device)",
                sc.output_device ? (", output_device=" + std::to_string(*sc.output_device)).c_str() : "");
  if (!quiet && !json && sc.parallel_mode() == ParallelMode::ddp)
    std::printf("  torchrun --nproc-per-node %s: in every rank's process model = DDP(model, device_ids=[local_rank], "
                "bucket_cap_mb=%g), DataLoader(batch_size=batch/world, sampler=DistributedSampler(...))\n",
                worker ? std::to_string(worker->local_world_size).c_str()
                : sc.nproc == -1 ? "<visible GPUs>" : std::to_string(sc.nproc).c_str(),
                sc.bucket_cap_mb);
  if (!quiet && !json && worker)
    std::printf("  started by %s: this process is rank %d of %d (LOCAL_RANK %d, node %d); the ranks meet at the store "
                "on %s:%d and all-reduce through %s\n",
                worker->launcher.c_str(), worker->rank, worker->world_size, worker->local_rank, worker->group_rank,
                worker->master_addr.c_str(), worker->master_port,
                launched_ddp_transport(sc.backend));
  if (!quiet && !json && (sc.env.count(kCudaVisibleDevices) || sc.env.count(kCudaDeviceOrder)))
    std::printf("  %s (furnace devices shows which GPU is which)\n", describe_cuda_environment(sc.env).c_str());
  if (!json) ck.on_note = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
  std::fflush(stdout);
  ck.stop_requested = stop_signal;
  int64_t total = 0;
  TrainResult r = train(sc, bus, [&](const Progress& p) {
    total = p.total_steps;
    if (progress) progress(p);
  }, ck);
  bar.finish();
  if (writer) name_trace_devices(*writer, r);
  if (r.stop_signal != 0) {
    if (writer) writer->write(o.trace_path);
    std::fflush(stdout);
    if (!silent) std::fprintf(stderr, "furnace: %s\n", stopped_line(r, total, ck.path).c_str());
    throw ExitCode{128 + r.stop_signal};
  }
  std::string one_gpu_why;
  const std::optional<double> one_gpu = r.stopped ? std::nullopt : one_gpu_samples_per_s(sc, r, &one_gpu_why);

  if (writer) {
    writer->write(o.trace_path);
    if (!json) std::printf("trace: %zu events written to %s (open it in https://ui.perfetto.dev)\n",
                             writer->event_count(), o.trace_path.c_str());
  }
  if (silent) return;
  if (json) {
    nlohmann::json j = to_json(r);
    j["modelled_samples_per_s"] = modelled_samples_per_s(r, sc);
    if (one_gpu) j[r.ddp ? "ddp" : "dp"]["one_gpu_modelled_samples_per_s"] = *one_gpu;
    if (worker)
      j["ddp"]["launcher"] = {{"by", worker->launcher}, {"rank", worker->rank}, {"world", worker->world_size},
                              {"nodes", worker->world_size / worker->local_world_size},
                              {"store", worker->master_addr + ":" + std::to_string(worker->master_port)},
                              {"backend", r.backend == "cuda" ? "nccl" : "gloo"}};
    if (r.batch_loading_s > 0)
      j["loading"] = {{"model", sc.loading}, {"batch_loading_s", r.batch_loading_s}, {"data_wait_s", r.data_wait_s}};
    if (sc.clip_grad_norm)
      j["clip_grad_norm"] = {{"max_norm", *sc.clip_grad_norm}, {"last_norm", r.last_grad_norm}, {"clipped_steps", r.clipped_steps}};
    if (!ck.path.empty()) j["checkpoint"] = checkpoint_json(r, ck.path);
    std::printf("%s\n", j.dump().c_str());
  } else {
    print_summary(r, sc, one_gpu, one_gpu_why);
    print_checkpoint_summary(r, ck.path, ck.save_every);
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto opts = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "train the reference MLP on Fashion-MNIST on a (simulated) GPU");
  Scenario& s = opts->scenario;
  cmd->add_option("--topology", s.topology, "machine: a name in data/topologies or a .toml path")->capture_default_str();
  s.backend = "auto";
  cmd->add_option("--backend", s.backend,
                  "auto (cuda when a GPU is present, else sim; $FURNACE_BACKEND overrides), sim "
                  "(CPU, modelled GPU clock) or cuda")
      ->capture_default_str();
  cmd->add_flag("--allow-tf32", s.allow_tf32,
                "torch.backends.cuda.matmul.allow_tf32 = True: fp32 GEMMs on TF32 tensor cores (cuda)");
  cmd->add_option("--epochs", s.epochs, "passes over the training set")->capture_default_str();
  cmd->add_option("--batch", s.batch, "batch size")->capture_default_str();
  cmd->add_option("--lr", s.lr, "learning rate")->capture_default_str();
  cmd->add_option("--momentum", s.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--optimizer", s.optimizer,
                  "sgd (torch.optim.SGD) or adamw (torch.optim.AdamW: decoupled weight decay; --lr defaults "
                  "to AdamW's 0.001)")->capture_default_str();
  cmd->add_option_function<float>("--weight-decay", [opts](float v) { opts->scenario.weight_decay = v; },
                                  "weight_decay (default: the optimizer's, SGD 0, AdamW 0.01)");
  cmd->add_option_function<std::string>("--betas", [opts](const std::string& v) { opts->betas = v; },
                                        "AdamW betas as beta1,beta2 (default 0.9,0.999)");
  cmd->add_option("--eps", s.eps, "AdamW eps")->capture_default_str();
  cmd->add_option_function<float>("--clip-grad-norm", [opts](float v) { opts->scenario.clip_grad_norm = v; },
                                  "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) before each "
                                  "optimizer step (after scaler.unscale_ under fp16)");
  cmd->add_option("--lr-schedule", s.lr_schedule, "constant, or cosine (CosineAnnealingLR over the run)")->capture_default_str();
  cmd->add_option("--hidden", opts->hidden, "hidden layer widths, comma-separated")->capture_default_str();
  cmd->add_option("--seed", s.seed, "seed for initialisation and shuffling")->check(unsigned_64())->capture_default_str();
  cmd->add_option("--data", s.data_dir, "MNIST-format folder (default: Debian's Fashion-MNIST)");
  cmd->add_option("--steps", s.max_steps, "stop after this many optimizer steps");
  cmd->add_option("--device", s.device, "logical device ordinal (cuda:N) to train on")->capture_default_str();
  cmd->add_option_function<std::string>("--visible", [opts](const std::string& v) { opts->visible = v; },
                                        "CUDA_VISIBLE_DEVICES of the training process (default: this shell's)");
  cmd->add_option_function<std::string>("--order", [opts](const std::string& v) { opts->order = v; },
                                        "CUDA_DEVICE_ORDER: FASTEST_FIRST or PCI_BUS_ID (default: this shell's)");
  cmd->add_option("--parallel", s.parallel, "none; dp: torch.nn.DataParallel over --device-ids; ddp: "
                  "DistributedDataParallel, one process per GPU (rank r on cuda:r)")->capture_default_str();
  cmd->add_option("--nproc", s.nproc, "ddp: processes (ranks), as torchrun --nproc-per-node (default: one per visible GPU)");
  cmd->add_option("--bucket-cap-mb", s.bucket_cap_mb, "ddp: DDP's bucket_cap_mb (gradient buckets all-reduced "
                  "as backward produces them)")->capture_default_str();
  cmd->add_option("--dist-timeout", s.dist_timeout_s,
                  "ddp under a launcher (furnace launch, torchrun, mpirun, srun): seconds a rank waits for the others "
                  "to join and in each collective, as init_process_group(timeout=)")->capture_default_str();
  cmd->add_flag("--no-set-epoch{false}", s.sampler_set_epoch,
                "ddp: never call sampler.set_epoch(epoch): every epoch repeats epoch 0's order (the trap)");
  cmd->add_option_function<std::string>("--device-ids", [opts](const std::string& v) { opts->device_ids = v; },
                                        "DataParallel's device_ids, e.g. 0,1,2,3 (default: every visible device)");
  cmd->add_option_function<int>("--output-device", [opts](int v) { opts->scenario.output_device = v; },
                                "DataParallel's output_device (default: device_ids[0])");
  cmd->add_option("--amp", s.amp, "mixed precision: off, fp16 (autocast + GradScaler) or bf16")->capture_default_str();
  cmd->add_option("--init-scale", s.scaler.init_scale, "fp16: GradScaler init_scale")->capture_default_str();
  cmd->add_option("--growth-interval", s.scaler.growth_interval, "fp16: GradScaler growth_interval")->capture_default_str();
  cmd->add_option("--accum", s.accum, "gradient accumulation: micro-batches per optimizer step (loss / accum each); an "
                  "epoch's last, shorter group is stepped at the epoch's end, still divided by accum "
                  "(the loop `if (i+1) % accum == 0 or i+1 == len(loader)`)")->capture_default_str();
  // "{false}": given, the flag stores false; a value such as --no-eval=x is CLI11's conversion error.
  cmd->add_flag("--accum-no-divide{false}", s.accum_divide,
                "do not divide the loss by --accum (the article's snippet: effectively lr x accum)");
  cmd->add_option("--workers", s.workers, "DataLoader num_workers")->capture_default_str();
  cmd->add_option("--prefetch-factor", s.prefetch_factor, "DataLoader prefetch_factor (needs --workers > 0)");
  cmd->add_flag("--pin-memory", s.pin_memory, "DataLoader pin_memory: pinned batches, faster host-to-device copies");
  cmd->add_option("--loading", s.loading,
                  "model the host's loading time on the simulated clock: off, tensors (a TensorDataset in "
                  "memory) or torchvision (FashionMNIST with ToTensor + Normalize); off by default, so the simulated "
                  "GPU's samples/s is its kernels and copies alone; docs/host-loading.md")
      ->capture_default_str();
  cmd->add_flag("--no-eval{false}", s.evaluate, "skip the test-set evaluation");
  cmd->add_option("--trace", opts->trace_path, "write a Chrome trace (Perfetto) to this file");
  cmd->add_flag("--json", opts->json, "end stdout with one JSON object of the results");
  cmd->add_flag("--quiet", opts->quiet, "no progress bar");
  cmd->add_option("--checkpoint", opts->checkpoint,
                  "save the whole training state to this file (atomically) at the end of the run");
  cmd->add_option("--save-every", opts->save_every, "also save the checkpoint every N optimizer steps");
  cmd->add_option("--resume", opts->resume,
                  "continue the run saved in this checkpoint (its scenario; saving goes on to the same file). "
                  "A --parallel ddp checkpoint resumes on every rank with its --nproc (bit for bit); another "
                  "--nproc with the same global batch is accepted at an epoch boundary, or inside an epoch when "
                  "DistributedSampler pads both to the same ceil(N/world)*world (the same samples per step, equal "
                  "up to fp32 rounding); one GPU <-> ddp only at an epoch boundary; anything else is refused");
  cmd->add_option("--stop-at-step", opts->stop_at_step,
                  "end after this optimizer step, saving the checkpoint, as a job's time limit would");
  cmd->add_flag("--strict-keys", opts->strict_keys,
                "--resume: load the model's state_dict as PyTorch's strict load_state_dict (no \"module.\" fix-up)");
  cmd->callback([opts, cmd] {
    opts->device_given = cmd->count("--device") > 0;
    opts->given = [cmd](const std::string& flag) { return cmd->count(flag) > 0; };
    run(*opts);
  });
}

}  // namespace furnace::cli
