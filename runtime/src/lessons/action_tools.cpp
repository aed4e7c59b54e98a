// action_tools.cpp: the lesson actions over ready-made instruments of the runtime:
// `dp-loss-trap` (run_loss_trap), `scaler` (replay_scaler) and `machine` (run_machine_scenario).
#include <map>
#include <mutex>
#include <utility>

#include "furnace/amp.h"                // defines: replay_scaler, GradScalerOptions
#include "furnace/scenario_options.h"  // defines: scaler_options
#include "furnace/backend.h"            // defines: make_backend
#include "furnace/error.h"              // defines: FURNACE_CHECK
#include "furnace/machine_scenarios.h"  // defines: run_machine_scenario
#include "furnace/parallel.h"           // defines: run_loss_trap
#include "furnace/runtime.h"            // defines: Runtime
#include "furnace/topology.h"           // defines: load_topology
#include "lessons/actions.h"            // defines: run_loss_trap, run_scaler, run_machine

namespace furnace::lesson::detail {

void run_loss_trap(const StepScenario& s, Observables& out) {
  const Scenario& sc = s.scenario;
  const Topology topo = load_topology(sc.topology);
  TraceBus bus;
  Runtime rt(make_backend("sim", topo, &bus, sc.env), bus);
  rt.init();
  std::vector<int> ids = sc.device_ids.value_or(std::vector<int>{});
  FURNACE_CHECK(!sc.device_ids || !ids.empty()) << "list index out of range (device_ids is empty)";
  const LossTrapResult r =
      furnace::run_loss_trap(rt, ids, sc.batch, sc.seed, [&](const std::string& m) { add_warning(out, m); });
  std::vector<double> losses(r.replica_losses.begin(), r.replica_losses.end());
  out["chunks"] = Value::of_ints(r.chunks);
  out["replica_losses"] = Value::of_numbers(losses);
  out["mean_of_means"] = Value::of_number(r.mean_of_means);
  out["batch_mean"] = Value::of_number(r.batch_mean);
  out["weighted_mean"] = Value::of_number(r.weighted_mean);
  out["grad_relative_difference"] = Value::of_number(r.grad_relative_difference);
}

void run_scaler(const StepScenario& s, Observables& out) {
  GradScalerOptions o = scaler_options(s.scenario);
  o.enabled = true;  // the replay is of a GradScaler, whatever the scenario's amp
  const std::vector<ScalerStep> steps = replay_scaler(s.scenario.max_steps, s.overflow_at, o);
  std::vector<double> scales;
  std::vector<Value> skipped;
  int64_t n_skipped = 0;
  for (const ScalerStep& st : steps) {
    scales.push_back(st.scale);
    skipped.push_back(Value::of_bool(st.skipped));
    n_skipped += st.skipped ? 1 : 0;
  }
  out["scales"] = Value::of_numbers(scales);
  out["skipped"] = Value::of_array(std::move(skipped));
  out["skipped_steps"] = Value::of_int(n_skipped);
  out["optimizer_steps"] = Value::of_int(static_cast<int64_t>(steps.size()) - n_skipped);
  out["final_scale"] = Value::of_number(steps.empty() ? o.init_scale : steps.back().next_scale);
  out["growth_tracker"] = Value::of_int(steps.empty() ? 0 : steps.back().growth_tracker);
}

// A story is deterministic and takes seconds (every job really trains), and a lesson reads
// several parts of the same one: each (story, topology) runs once per program.
const MachineScenarioResult& machine_story(const std::string& story, const std::string& topology) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, MachineScenarioResult> done;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(story, topology);
  auto it = done.find(key);
  if (it == done.end()) it = done.emplace(key, run_machine_scenario(story, topology)).first;
  return it->second;
}

void run_machine(const StepScenario& s, Observables& out) {
  const MachineScenarioResult& r = machine_story(s.story, s.scenario.topology);
  out["part_count"] = Value::of_int(static_cast<int64_t>(r.parts.size()));
  FURNACE_CHECK(s.part >= 1 && static_cast<size_t>(s.part) <= r.parts.size())
      << "story '" << s.story << "' has " << r.parts.size() << " parts (part = " << s.part << ")";
  const ScenarioPart& part = r.parts[static_cast<size_t>(s.part - 1)];
  std::vector<std::string> outputs, names, mappings;
  for (const ScenarioStep& st : part.steps)
    if (st.kind == ScenarioStep::Kind::output) outputs.push_back(st.text);
  for (const ScenarioProcess& p : part.processes) {
    names.push_back(p.name);
    mappings.push_back(p.visibility.mapping_text());
  }
  std::vector<int64_t> used, counts, contexts;
  for (const SmiGpu& g : part.smi.gpus) {
    used.push_back(static_cast<int64_t>(g.used_bytes));
    counts.push_back(static_cast<int64_t>(g.processes.size()));
    int64_t context = 0;
    for (const SmiProcess& p : g.processes) context += static_cast<int64_t>(p.context_bytes);
    contexts.push_back(context);
  }
  out["outputs"] = Value::of_strings(outputs);
  out["process_names"] = Value::of_strings(names);
  out["process_mappings"] = Value::of_strings(mappings);
  out["smi_used"] = Value::of_ints(used);
  out["smi_process_count"] = Value::of_ints(counts);
  out["smi_context"] = Value::of_ints(contexts);
}

}  // namespace furnace::lesson::detail
