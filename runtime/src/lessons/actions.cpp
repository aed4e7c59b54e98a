// actions.cpp: the table of lesson actions (the scenario keys each reads, the observables each
// produces; lessons/FORMAT.md documents the same) and run_action, which runs the action of a
// step's setup and turns an error the runtime raises into the "error" observable. The actions
// themselves: action_*.cpp; the keys themselves (reading, summary): step_setup.cpp.
#include <cstdlib>
#include <exception>
#include <variant>

#include "furnace/error.h"   // defines: Error
#include "furnace/lesson.h"  // defines: actions, run_action
#include "lessons/actions.h"  // defines: run_devices, run_forward, ...

#ifndef FURNACE_DEFAULT_DATA_DIR
#define FURNACE_DEFAULT_DATA_DIR "data"
#endif

namespace furnace::lesson {
namespace {

using T = Value::Type;

ObservableInfo num(const char* n) { return {n, T::number}; }
ObservableInfo boolean(const char* n) { return {n, T::boolean}; }
ObservableInfo str(const char* n) { return {n, T::string}; }
ObservableInfo nums(const char* n) { return {n, T::array, T::number}; }
ObservableInfo bools(const char* n) { return {n, T::array, T::boolean}; }
ObservableInfo strs(const char* n) { return {n, T::array, T::string}; }

std::vector<ActionInfo> make_actions() {
  std::vector<ActionInfo> a;
  a.push_back({"devices", "a process on a simulated machine: torch.cuda's device API",
               {"topology", "env", "set_visible_before_init", "set_visible_after_init", "set_device"},
               {num("device_count"), num("current_device"), nums("physical"), str("mapping"),
                strs("device_names"), strs("smi_names"), num("gpu_count"), str("stop"), strs("notes"),
                str("environ"), boolean("initialized"), bools("peer_access"),
                num("nvml_device_count")}});
  a.push_back({"forward", "one forward pass of the MLP, bare or through nn.DataParallel",
               {"topology", "env", "parallel", "device", "device_ids", "output_device", "model_device",
                "input_device", "batch", "hidden", "seed"},
               {nums("device_ids"), num("output_device"), nums("chunks"), num("replicas"), str("output_on"),
                strs("notes")}});
  a.push_back({"train", "the training loop (furnace train) on the Fashion-MNIST slice",
               {"topology", "env", "parallel", "device", "device_ids", "output_device", "batch", "hidden",
                "steps", "epochs", "lr", "lr_schedule", "momentum", "optimizer", "weight_decay", "clip_grad_norm",
                "seed", "accum", "accum_divide", "amp", "init_scale", "growth_factor", "backoff_factor",
                "growth_interval", "workers", "prefetch_factor", "pin_memory", "loading", "nproc", "bucket_cap_mb",
                "sampler_set_epoch"},
               {num("steps"), nums("losses"), boolean("loss_rose"), num("data_wait_ms"), num("data_wait_percent"), num("batch_loading_ms"), nums("grad_norms"), num("clipped_steps"), nums("micro_batches"), num("final_loss"), num("effective_batch"), num("skipped_steps"),
                num("loss_scale"), nums("loss_scales"), num("step_ms"), num("samples_per_s"), num("h2d_ms"),
                num("forward_ms"), num("loss_ms"), num("backward_ms"), num("optimizer_ms"),
                nums("memory_allocated"), nums("memory_reserved"), nums("max_memory_allocated"),
                nums("max_memory_reserved"), nums("context"), nums("smi_used"), nums("device_ids"),
                nums("chunks"), num("output_device"), nums("busy_ms"), nums("idle_ms"),
                num("warned_gpu"), str("warned_gpu_name"), num("warned_gpu_smi"),
                num("wall_samples_per_s"), nums("epoch_losses"), num("ddp_world"), num("ddp_rank_batch"),
                num("ddp_step_ms"), num("ddp_hidden_share"), nums("ddp_bucket_bytes"),
                num("allreduce_bytes_per_step"), num("sent_bytes_per_step"), nums("comm_ms"), nums("exposed_ms")}});
  a.push_back({"memory", "the caching allocator replayed (furnace memory)",
               {"topology", "device", "alloc", "free", "empty_cache"},
               {nums("allocated_steps"), nums("reserved_steps"), num("memory_allocated"), num("memory_reserved"),
                num("max_memory_reserved"), num("context"), num("smi_used"), strs("notes"),
                num("memory_allocated_mib"), num("memory_reserved_mib"), num("smi_used_mib")}});
  a.push_back({"dp-loss-trap", "the mean of per-replica mean losses (furnace dp-loss-trap)",
               {"topology", "env", "batch", "device_ids", "seed"},
               {nums("chunks"), nums("replica_losses"), num("mean_of_means"), num("batch_mean"),
                num("weighted_mean"), num("grad_relative_difference")}});
  a.push_back({"scaler", "GradScaler's scale sequence (furnace scaler)",
               {"steps", "overflow_at", "init_scale", "growth_factor", "backoff_factor", "growth_interval"},
               {nums("scales"), bools("skipped"), num("skipped_steps"), num("optimizer_steps"),
                num("final_scale"), num("growth_tracker")}});
  a.push_back({"machine", "several processes on one machine (furnace scenario run)",
               {"topology", "story", "part"},
               {num("part_count"), strs("outputs"), strs("process_names"), strs("process_mappings"),
                nums("smi_used"), nums("smi_process_count"), nums("smi_context")}});
  a.push_back({"loader", "torch.utils.data.DataLoader alone on the Fashion-MNIST slice",
               {"batch", "workers", "prefetch_factor", "pin_memory", "seed"},
               {num("batches"), num("prefetched"), num("in_flight"), boolean("pinned"), nums("first_indices"),
                num("last_batch")}});
  return a;
}

// Runs the action whose setup the step holds.
struct Runner {
  Observables& out;
  TraceBus* trace;
  void operator()(const DevicesSetup& s) const { detail::run_devices(s, out); }
  void operator()(const ForwardSetup& s) const { detail::run_forward(s, out, trace); }
  void operator()(const TrainSetup& s) const { detail::run_train(s, out, trace); }
  void operator()(const MemorySetup& s) const { detail::run_memory(s, out); }
  void operator()(const LossTrapSetup& s) const { detail::run_loss_trap(s, out); }
  void operator()(const ScalerSetup& s) const { detail::run_scaler(s, out); }
  void operator()(const MachineSetup& s) const { detail::run_machine(s, out); }
  void operator()(const LoaderSetup& s) const { detail::run_loader(s, out); }
};

}  // namespace

const std::vector<ActionInfo>& actions() {
  static const std::vector<ActionInfo> table = make_actions();
  return table;
}

const ActionInfo* find_action(std::string_view name) {
  for (const ActionInfo& a : actions())
    if (a.name == name) return &a;
  return nullptr;
}

const std::vector<std::string>& panels() {
  static const std::vector<std::string> names = {"devices", "step_flow", "memory", "training", "timeline", "controls"};
  return names;
}

Observables run_action(const Step& step, TraceBus* trace) {
  Observables out;
  out["error"] = Value::of_string("");
  out["warnings"] = Value::of_array({});
  try {
    std::visit(Runner{out, trace}, step.setup.action);
  } catch (const std::exception& e) {
    out["error"] = Value::of_string(e.what());
  }
  return out;
}

namespace detail {

void add_warning(Observables& out, const std::string& message) {
  Value& w = out["warnings"];
  w.type = Value::Type::array;
  w.items.push_back(Value::of_string(message));
}

}  // namespace detail

std::string lesson_data_dir() {
  if (const char* d = std::getenv("FURNACE_DATA_DIR"); d && *d) return std::string(d) + "/fashion-mnist";
  return std::string(FURNACE_DEFAULT_DATA_DIR) + "/fashion-mnist";
}

}  // namespace furnace::lesson
