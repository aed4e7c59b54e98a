// action_train.cpp: the `train` lesson action: furnace::train (the same loop as `furnace train`)
// on the committed Fashion-MNIST slice, with the loss and the loss scale of every optimizer step
// taken from the progress callback, and the modelled time of each training phase summed from the
// trace's phase events.
#include <cmath>
#include <map>
#include <string>

#include "furnace/train.h"    // defines: train, Scenario, TrainResult
#include "lessons/actions.h"  // defines: run_train, lesson_data_dir

namespace furnace::lesson::detail {

namespace {

// DistributedDataParallel (parallel = "ddp"): each rank's GPU, batch and time per optimizer step
// (the DataParallel observables device_ids, chunks, busy_ms, idle_ms, read per rank), and the
// all-reduce: its buckets, its bytes, the share of it hidden behind backward.
void add_ddp(const DdpReport& d, Observables& out) {
  std::vector<int64_t> devices, chunks;
  std::vector<double> busy, idle, comm, exposed;
  for (const DdpRankReport& rank : d.ranks) {
    devices.push_back(rank.device);
    chunks.push_back(d.rank_batch);
    busy.push_back(rank.busy_s * 1e3);
    idle.push_back(rank.idle_s * 1e3);
    comm.push_back(rank.comm_s * 1e3);
    exposed.push_back(rank.exposed_s * 1e3);
  }
  out["device_ids"] = Value::of_ints(devices);
  out["chunks"] = Value::of_ints(chunks);
  out["output_device"] = Value::of_int(d.ranks.empty() ? 0 : d.ranks.front().device);  // rank 0's GPU
  out["busy_ms"] = Value::of_numbers(busy);
  out["idle_ms"] = Value::of_numbers(idle);
  out["comm_ms"] = Value::of_numbers(comm);
  out["exposed_ms"] = Value::of_numbers(exposed);
  out["ddp_world"] = Value::of_int(d.world);
  out["ddp_rank_batch"] = Value::of_int(d.rank_batch);
  out["ddp_step_ms"] = Value::of_number(d.step_s * 1e3);
  out["ddp_hidden_share"] = Value::of_number(d.hidden_share);
  out["ddp_bucket_bytes"] = Value::of_ints(std::vector<int64_t>(d.bucket_bytes.begin(), d.bucket_bytes.end()));
  out["allreduce_bytes_per_step"] = Value::of_int(static_cast<int64_t>(d.allreduce_bytes_per_step));
  out["sent_bytes_per_step"] = Value::of_int(static_cast<int64_t>(d.sent_bytes_per_step));
}

}  // namespace

void run_train(const TrainSetup& s, Observables& out, TraceBus* trace) {
  Scenario sc = s.scenario;
  if (sc.data_dir.empty()) sc.data_dir = lesson_data_dir();
  sc.echo_warnings = false;  // the step's results show them (observable `warnings`)
  TraceBus local;
  TraceBus& bus = trace ? *trace : local;

  // Modelled seconds per phase on the training device (single device: h2d, forward, loss,
  // backward, optimizer). Emitted only while someone subscribes, hence the subscription.
  std::map<std::string, double> phase_s;
  const int id = bus.subscribe([&](const TraceEvent& e) {
    if (e.kind == EventKind::phase && e.device == sc.device) phase_s[e.name] += e.dur_s;
  });
  std::vector<double> losses, scales, norms;
  std::vector<int64_t> groups;
  TrainResult r;
  try {
    r = train(sc, bus, [&](const Progress& p) {
      losses.push_back(p.loss);
      scales.push_back(p.loss_scale);
      groups.push_back(p.micro_batches);
      if (p.grad_norm >= 0 || std::isnan(p.grad_norm)) norms.push_back(p.grad_norm);
    });
  } catch (...) {
    bus.unsubscribe(id);
    throw;
  }
  bus.unsubscribe(id);

  const double steps = static_cast<double>(r.steps);
  out["steps"] = Value::of_int(r.steps);
  out["losses"] = Value::of_numbers(losses);
  out["micro_batches"] = Value::of_ints(groups);
  out["grad_norms"] = Value::of_numbers(norms);
  out["clipped_steps"] = Value::of_int(r.clipped_steps);
  out["data_wait_ms"] = Value::of_number(steps > 0 ? r.data_wait_s * 1e3 / steps : 0.0);
  out["batch_loading_ms"] = Value::of_number(r.batch_loading_s * 1e3);
  out["data_wait_percent"] = Value::of_int(
      r.modelled_step_s > 0 && steps > 0 ? std::llround(100.0 * r.data_wait_s / steps / r.modelled_step_s) : 0);
  bool rose = false;  // some optimizer step's loss above the one before it
  for (size_t i = 1; i < losses.size(); ++i) rose = rose || losses[i] > losses[i - 1];
  out["loss_rose"] = Value::of_bool(rose);
  out["final_loss"] = Value::of_number(r.final_loss);
  out["effective_batch"] = Value::of_int(sc.batch * sc.accum);
  out["skipped_steps"] = Value::of_int(r.skipped_steps);
  out["loss_scale"] = Value::of_number(r.final_loss_scale);
  out["loss_scales"] = Value::of_numbers(scales);
  out["step_ms"] = Value::of_number(r.modelled_step_s * 1e3);
  out["samples_per_s"] = Value::of_number(
      r.modelled_step_s > 0 ? static_cast<double>(sc.batch * sc.accum) / r.modelled_step_s : 0.0);
  for (const char* phase : {"h2d", "forward", "loss", "backward", "optimizer"})
    out[std::string(phase) + "_ms"] = Value::of_number(steps > 0 ? phase_s[phase] * 1e3 / steps : 0.0);

  std::vector<int64_t> allocated, reserved, max_allocated, max_reserved, context, smi;
  for (const DeviceMemoryReport& m : r.memory) {
    allocated.push_back(static_cast<int64_t>(m.allocated_bytes));
    reserved.push_back(static_cast<int64_t>(m.reserved_bytes));
    max_allocated.push_back(static_cast<int64_t>(m.peak_allocated_bytes));
    max_reserved.push_back(static_cast<int64_t>(m.peak_reserved_bytes));
    context.push_back(static_cast<int64_t>(m.context_bytes));
    smi.push_back(static_cast<int64_t>(m.context_bytes + m.reserved_bytes));
  }
  out["memory_allocated"] = Value::of_ints(allocated);
  out["memory_reserved"] = Value::of_ints(reserved);
  out["max_memory_allocated"] = Value::of_ints(max_allocated);
  out["max_memory_reserved"] = Value::of_ints(max_reserved);
  out["context"] = Value::of_ints(context);
  out["smi_used"] = Value::of_ints(smi);
  out["wall_samples_per_s"] = Value::of_number(r.samples_per_s);
  out["epoch_losses"] = Value::of_numbers(std::vector<double>(r.epoch_mean_loss.begin(), r.epoch_mean_loss.end()));

  // The GPU DataParallel's imbalance warning says to exclude (its number is a cuda ordinal);
  // -1 and "" where it did not warn.
  const parallel::NamedGpu warned = r.dp ? r.dp->warned_gpu.value_or(parallel::NamedGpu{}) : parallel::NamedGpu{};
  out["warned_gpu"] = Value::of_int(warned.ordinal);
  out["warned_gpu_name"] = Value::of_string(warned.name);
  out["warned_gpu_smi"] = Value::of_int(warned.smi);
  if (r.dp) {
    std::vector<double> busy, idle;
    for (const DpDeviceTime& t : r.dp->per_device) {
      busy.push_back(t.busy * 1e3);
      idle.push_back(t.idle * 1e3);
    }
    out["device_ids"] = Value::of_ints(r.dp->device_ids);
    out["chunks"] = Value::of_ints(r.dp->chunks);
    out["output_device"] = Value::of_int(r.dp->output_device);
    out["busy_ms"] = Value::of_numbers(busy);
    out["idle_ms"] = Value::of_numbers(idle);
    for (const std::string& w : r.dp->warnings) add_warning(out, w);
  } else if (r.ddp) {
    add_ddp(*r.ddp, out);
  } else {
    out["device_ids"] = Value::of_ints(std::vector<int>{sc.device});
    out["chunks"] = Value::of_ints(std::vector<int64_t>{sc.batch});
    out["output_device"] = Value::of_int(sc.device);  // busy_ms / idle_ms: DataParallel only
  }
}

}  // namespace furnace::lesson::detail
