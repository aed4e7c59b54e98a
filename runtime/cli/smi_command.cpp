// `furnace smi`: nvidia-smi's view of a simulated machine: per physical GPU (PCI bus order) its
// memory in use and utilization, and per process on it the memory it holds (its CUDA context plus
// what its caching allocator reserved). A simulated machine keeps no state between two runs of
// the CLI, so --scenario runs a scenario first and shows the machine at its end. Also the shared
// text/JSON views (machine_views.h). Not here: the accounting (backend/sim/sim_machine.cpp).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"       // defines: add_smi_command
#include "machine_views.h"  // defines: smi_table, smi_json, visibility_json
#include "text_table.h"     // defines: format_table
#include "furnace/stories.h"  // defines: run_story
#include "furnace/sim_machine.h"        // defines: SimMachine, SmiSnapshot
#include "furnace/topology.h"           // defines: load_topology

namespace furnace::cli {
namespace {

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + "MiB"; }

struct SmiOptions {
  std::string topology = "workstation-4x3090";
  std::string scenario;
  bool json = false;
};

void run_smi(const SmiOptions& o) {
  std::vector<std::pair<std::string, SmiSnapshot>> shots;  // title, snapshot
  if (o.scenario.empty()) {
    SimMachine m(load_topology(o.topology));
    shots.emplace_back("idle: no process has used a GPU yet (try --scenario two-jobs)", m.smi());
  } else {
    const StoryResult r = run_story(o.scenario, o.topology);
    for (const StoryPart& p : r.parts)
      shots.emplace_back("after scenario '" + r.name + "'" +
                             (r.parts.size() > 1 ? ", part \"" + p.title + "\"" : std::string()),
                         p.smi);
  }
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [title, s] : shots) {
      nlohmann::json j = smi_json(s);
      j["title"] = title;
      out.push_back(j);
    }
    // One machine: one object; a scenario in several parts: one object per part.
    std::printf("%s\n", (out.size() == 1 ? out[0] : nlohmann::json{{"parts", out}}).dump().c_str());
    return;
  }
  for (size_t i = 0; i < shots.size(); ++i) {
    std::printf("%sfurnace smi: %s (simulated), %s\n\n%s", i ? "\n" : "",
                shots[i].second.topology.c_str(), shots[i].first.c_str(),
                smi_table(shots[i].second).c_str());
  }
}

}  // namespace

std::string smi_table(const SmiSnapshot& s) {
  std::vector<std::vector<std::string>> gpus{{"GPU", "Name", "Bus-Id", "Memory-Usage", "GPU-Util"}};
  for (const SmiGpu& g : s.gpus)
    gpus.push_back({std::to_string(g.index), g.name, g.pci_bus_id,
                    mib(g.used_bytes) + " / " + mib(g.total_bytes),
                    std::to_string(g.utilization_percent) + "%"});
  std::string out = format_table(gpus, {.right = {true, false, false, true, true}});
  std::vector<std::vector<std::string>> procs{
      {"GPU", "PID", "Process name", "GPU Memory", "= CUDA context + reserved by PyTorch"}};
  for (const SmiGpu& g : s.gpus)
    for (const SmiProcess& p : g.processes)
      procs.push_back({std::to_string(g.index), std::to_string(p.pid), p.name, mib(p.used_bytes),
                       "= " + mib(p.context_bytes) + " + " + mib(p.reserved_bytes)});
  out += "\n  Processes:\n";
  if (procs.size() == 1) {
    out += "    No running processes found\n";
  } else {
    out += format_table(procs, {.right = {true, true, false, true, false}});
  }
  if (s.window_s > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "  (GPU-Util: share of the %.2f ms of modelled GPU time so far with a kernel "
                  "running)\n",
                  s.window_s * 1e3);
    out += buf;
  }
  return out;
}

nlohmann::json smi_json(const SmiSnapshot& s) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const SmiGpu& g : s.gpus) {
    nlohmann::json procs = nlohmann::json::array();
    for (const SmiProcess& p : g.processes)
      procs.push_back({{"pid", p.pid},
                       {"name", p.name},
                       {"used_bytes", p.used_bytes},
                       {"context_bytes", p.context_bytes},
                       {"reserved_bytes", p.reserved_bytes}});
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"uuid", g.uuid},
                    {"pci_bus_id", g.pci_bus_id},
                    {"memory_total_bytes", g.total_bytes},
                    {"memory_used_bytes", g.used_bytes},
                    {"utilization_percent", g.utilization_percent},
                    {"processes", procs}});
  }
  return {{"topology", s.topology}, {"window_s", s.window_s}, {"gpus", gpus}};
}

nlohmann::json visibility_json(const Visibility& v) {
  nlohmann::json visible = nlohmann::json::array();
  for (const VisibleDevice& d : v.devices)
    visible.push_back({{"ordinal", d.ordinal}, {"physical_index", d.physical_index}, {"entry", printable(d.entry)}});
  return {{"visible", visible},
          {"stop", visibility_stop_name(v.stop)},
          {"stop_entry", v.stop_entry},
          {"notes", v.notes}};
}

void add_smi_command(CLI::App& app) {
  auto opts = std::make_shared<SmiOptions>();
  CLI::App* cmd = app.add_subcommand(
      "smi", "nvidia-smi's view of a simulated machine: memory and utilization per GPU, memory per "
             "process (CUDA context + reserved)");
  cmd->add_option("--topology", opts->topology, "machine: a name in data/topologies or a .toml path")
      ->capture_default_str();
  cmd->add_option("--scenario", opts->scenario,
                  "run this scenario first and show the machine at its end (furnace scenario list)");
  cmd->add_flag("--json", opts->json,
                "one JSON object: {\"title\",\"topology\",\"window_s\",\"gpus\":[{\"index\",\"name\",\"uuid\","
                "\"pci_bus_id\",\"memory_total_bytes\",\"memory_used_bytes\",\"utilization_percent\","
                "\"processes\":[{\"pid\",\"name\",\"used_bytes\",\"context_bytes\",\"reserved_bytes\"}]}]}"
                " ({\"parts\":[...]} for a scenario in several parts)");
  cmd->footer("Example: furnace smi --scenario two-jobs");
  cmd->callback([opts] { run_smi(*opts); });
}

}  // namespace furnace::cli
