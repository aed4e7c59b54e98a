// actions.cpp: the table of lesson actions (the scenario keys each reads, the observables each
// produces; lessons/FORMAT.md documents the same) and run_action, which runs one and turns an
// error the runtime raises into the "error" observable. The actions themselves: action_*.cpp.
#include <cstdlib>
#include <exception>

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
                str("environ"), boolean("initialized")}});
  a.push_back({"forward", "one forward pass of the MLP, bare or through nn.DataParallel",
               {"topology", "env", "parallel", "device", "device_ids", "output_device", "model_device",
                "input_device", "batch", "hidden", "seed"},
               {nums("device_ids"), num("output_device"), nums("chunks"), num("replicas"), str("output_on"),
                strs("notes")}});
  a.push_back({"train", "the training loop (furnace train) on the Fashion-MNIST slice",
               {"topology", "env", "parallel", "device", "device_ids", "output_device", "batch", "hidden",
                "steps", "epochs", "lr", "lr_schedule", "momentum", "seed", "accum", "accum_divide", "amp",
                "init_scale", "growth_factor", "backoff_factor", "growth_interval", "workers",
                "prefetch_factor", "pin_memory"},
               {num("steps"), nums("losses"), num("final_loss"), num("effective_batch"), num("skipped_steps"),
                num("loss_scale"), nums("loss_scales"), num("step_ms"), num("samples_per_s"), num("h2d_ms"),
                num("forward_ms"), num("loss_ms"), num("backward_ms"), num("optimizer_ms"),
                nums("memory_allocated"), nums("memory_reserved"), nums("max_memory_allocated"),
                nums("max_memory_reserved"), nums("context"), nums("smi_used"), nums("device_ids"),
                nums("chunks"), num("output_device"), nums("busy_ms"), nums("idle_ms"),
                num("wall_samples_per_s")}});
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
  static const std::vector<std::string> names = {"devices", "pipeline", "memory", "training", "timeline", "controls"};
  return names;
}

std::string scenario_summary(const Step& step) {
  const StepScenario& s = step.scenario;
  const Scenario& sc = s.scenario;
  auto ints = [](const std::vector<int>& v) {
    std::string out;
    for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
    return "[" + out + "]";
  };
  auto num = [](double v) { return format_value(Value::of_number(v)); };
  std::string out = step.action + ":";
  bool first = true;
  auto add = [&](const std::string& text) {
    out += (first ? " " : ", ") + text;
    first = false;
  };
  if (step.action != "scaler" && step.action != "loader") add("topology " + sc.topology);
  for (const std::string& k : s.keys) {
    if (k == "topology") continue;
    if (k == "env") {
      for (const auto& [ek, ev] : sc.env) add(ek + "=" + ev);
    } else if (k == "set_visible_before_init") {
      add("os.environ['CUDA_VISIBLE_DEVICES']='" + *s.set_visible_before_init + "' before the first device use");
    } else if (k == "set_visible_after_init") {
      add("os.environ['CUDA_VISIBLE_DEVICES']='" + *s.set_visible_after_init + "' after the first device use");
    } else if (k == "set_device") {
      add("set_device(" + std::to_string(*s.set_device) + ")");
    } else if (k == "device_ids") {
      add("device_ids " + ints(*sc.device_ids));
    } else if (k == "output_device") {
      add("output_device " + std::to_string(*sc.output_device));
    } else if (k == "hidden") {
      add("hidden " + ints(sc.hidden));
    } else if (k == "free") {
      add("free " + ints(s.free));
    } else if (k == "alloc") {
      std::string a;
      for (const std::string& x : s.alloc) a += (a.empty() ? "" : ",") + x;
      add("alloc [" + a + "]");
    } else if (k == "overflow_at") {
      std::string a;
      for (int64_t x : s.overflow_at) a += (a.empty() ? "" : ",") + std::to_string(x);
      add("overflow_at [" + a + "]");
    } else if (k == "parallel") add("parallel " + sc.parallel);
    else if (k == "device") add("device " + std::to_string(sc.device));
    else if (k == "model_device") add("model on " + s.model_device);
    else if (k == "input_device") add("input on " + s.input_device);
    else if (k == "batch") add("batch " + std::to_string(sc.batch));
    else if (k == "steps") add("steps " + std::to_string(sc.max_steps));
    else if (k == "epochs") add("epochs " + std::to_string(sc.epochs));
    else if (k == "lr") add("lr " + num(sc.lr));
    else if (k == "lr_schedule") add("lr_schedule " + sc.lr_schedule);
    else if (k == "momentum") add("momentum " + num(sc.momentum));
    else if (k == "seed") add("seed " + std::to_string(sc.seed));
    else if (k == "accum") add("accum " + std::to_string(sc.accum));
    else if (k == "accum_divide") add(sc.accum_divide ? "loss / accum" : "loss NOT divided by accum");
    else if (k == "amp") add("amp " + sc.amp);
    else if (k == "init_scale") add("init_scale " + num(sc.scaler.init_scale));
    else if (k == "growth_factor") add("growth_factor " + num(sc.scaler.growth_factor));
    else if (k == "backoff_factor") add("backoff_factor " + num(sc.scaler.backoff_factor));
    else if (k == "growth_interval") add("growth_interval " + std::to_string(sc.scaler.growth_interval));
    else if (k == "workers") add("num_workers " + std::to_string(sc.workers));
    else if (k == "prefetch_factor") add("prefetch_factor " + std::to_string(sc.prefetch_factor));
    else if (k == "pin_memory") add(std::string("pin_memory ") + (sc.pin_memory ? "True" : "False"));
    else if (k == "empty_cache") add(s.empty_cache ? "empty_cache()" : "no empty_cache()");
    else if (k == "story") add("story " + s.story);
    else if (k == "part") add("part " + std::to_string(s.part));
  }
  return out;
}

Observables run_action(const Step& step, TraceBus* trace) {
  Observables out;
  out["error"] = Value::of_string("");
  out["warnings"] = Value::of_array({});
  const StepScenario& s = step.scenario;
  try {
    if (step.action == "devices") detail::run_devices(s, out);
    else if (step.action == "forward") detail::run_forward(s, out, trace);
    else if (step.action == "train") detail::run_train(s, out, trace);
    else if (step.action == "memory") detail::run_memory(s, out);
    else if (step.action == "dp-loss-trap") detail::run_loss_trap(s, out);
    else if (step.action == "scaler") detail::run_scaler(s, out);
    else if (step.action == "machine") detail::run_machine(s, out);
    else if (step.action == "loader") detail::run_loader(s, out);
    else FURNACE_FAIL() << "unknown action '" << step.action << "'";
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
