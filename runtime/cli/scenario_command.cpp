// `furnace scenario list` and `furnace scenario run NAME`: several simulated processes on one
// machine, as the article's section 3 describes them (two jobs on disjoint GPUs; the
// select_least_used_gpu function, its traps and a fix), printed as a terminal session: shell
// lines, the Python each process runs, what it prints, notes, and nvidia-smi where the story
// calls it. Not here: the scenarios themselves (runtime/src/lessons/machine_scenarios.cpp).
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"       // defines: add_scenario_command
#include "machine_views.h"  // defines: smi_table, smi_json, visibility_json
#include "furnace/error.h"              // defines: FURNACE_CHECK
#include "furnace/machine_scenarios.h"  // defines: run_machine_scenario, machine_scenarios

namespace furnace::cli {
namespace {

constexpr size_t kWidth = 100;

// Word-wraps `text` to kWidth columns, every line starting with `indent`.
std::string wrap(const std::string& text, const std::string& indent) {
  std::istringstream words(text);
  std::string out, line, w;
  while (words >> w) {
    if (!line.empty() && indent.size() + line.size() + 1 + w.size() > kWidth) {
      out += indent + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  if (!line.empty()) out += indent + line + "\n";
  return out;
}

std::string lines_with(const std::string& text, const std::string& first, const std::string& rest) {
  std::istringstream in(text);
  std::string out, l;
  bool head = true;
  while (std::getline(in, l)) {
    out += (head ? first : rest) + l + "\n";
    head = false;
  }
  return out;
}

void print_text(const MachineScenarioResult& r) {
  std::printf("== %s  [%s, simulated] ==\n", r.title.c_str(), r.topology.c_str());
  for (const ScenarioPart& part : r.parts) {
    std::printf("\n-- %s --\n\n", part.title.c_str());
    std::string who;
    for (const ScenarioStep& s : part.steps) {
      if (!s.who.empty() && s.who != who && s.kind != ScenarioStep::Kind::shell) {
        std::printf("  [%s]\n", s.who.c_str());
      }
      if (s.kind != ScenarioStep::Kind::shell) who = s.who.empty() ? who : s.who;
      switch (s.kind) {
        case ScenarioStep::Kind::shell:
          std::printf("$ %s\n", s.text.c_str());
          who.clear();
          break;
        case ScenarioStep::Kind::code:
          std::printf("%s", lines_with(s.text, "  >>> ", "  ... ").c_str());
          break;
        case ScenarioStep::Kind::output:
          std::printf("%s", lines_with(s.text, "      ", "      ").c_str());
          break;
        case ScenarioStep::Kind::note:
          std::printf("%s", wrap("note: " + s.text, s.who.empty() ? "" : "  ").c_str());
          break;
        case ScenarioStep::Kind::smi:
          std::printf("\n%s", smi_table(*s.smi).c_str());
          std::printf("%s\n", wrap("note: " + s.text, "").c_str());
          break;
      }
    }
  }
}

nlohmann::json to_json(const MachineScenarioResult& r) {
  nlohmann::json parts = nlohmann::json::array();
  for (const ScenarioPart& part : r.parts) {
    nlohmann::json steps = nlohmann::json::array();
    for (const ScenarioStep& s : part.steps) {
      nlohmann::json j{{"kind", scenario_step_kind_name(s.kind)}, {"who", s.who}, {"text", s.text}};
      if (s.smi) j["smi"] = smi_json(*s.smi);
      steps.push_back(j);
    }
    nlohmann::json procs = nlohmann::json::array();
    for (const ScenarioProcess& p : part.processes) {
      nlohmann::json devices = nlohmann::json::array();
      for (const ScenarioProcess::Device& d : p.devices)
        devices.push_back({{"ordinal", d.ordinal},
                           {"physical_index", d.physical_index},
                           {"context_bytes", d.context_bytes},
                           {"reserved_bytes", d.reserved_bytes},
                           {"allocated_bytes", d.allocated_bytes}});
      nlohmann::json j = visibility_json(p.visibility);
      j["pid"] = p.pid;
      j["name"] = p.name;
      j["env"] = p.env;
      j["devices"] = devices;
      procs.push_back(j);
    }
    parts.push_back({{"title", part.title}, {"steps", steps}, {"processes", procs}, {"smi", smi_json(part.smi)}});
  }
  return {{"name", r.name}, {"title", r.title}, {"topology", r.topology}, {"parts", parts}};
}

struct ScenarioOptions {
  std::string name;
  std::string topology;
  bool json = false;
};

}  // namespace

void add_scenario_command(CLI::App& app) {
  std::string names;
  for (const auto& [n, d] : machine_scenarios()) names += "\n  " + n + ": " + d;
  CLI::App* cmd = app.add_subcommand(
      "scenario", "several simulated processes on one machine: two jobs, the article's "
                  "select_least_used_gpu (furnace scenario list)");
  cmd->require_subcommand(0, 1);
  cmd->footer("Scenarios:" + names + "\nExample: furnace scenario run select-gpu");
  cmd->callback([cmd] {
    std::string known;
    for (const auto& [n, d] : machine_scenarios()) known += (known.empty() ? "" : ", ") + n;
    FURNACE_CHECK(!cmd->get_subcommands().empty())
        << "scenario: say 'furnace scenario list' or 'furnace scenario run NAME' (NAME: " << known << ")";
  });

  CLI::App* list = cmd->add_subcommand("list", "list the scenarios");
  list->callback([] {
    for (const auto& [n, d] : machine_scenarios()) std::printf("%-12s %s\n", n.c_str(), d.c_str());
  });

  auto opts = std::make_shared<ScenarioOptions>();
  CLI::App* run = cmd->add_subcommand("run", "run a scenario and print it as a terminal session");
  run->add_option("name", opts->name, "two-jobs or select-gpu")->required();
  run->add_option("--topology", opts->topology,
                  "machine with at least 4 GPUs (default: workstation-4x3090)");
  run->add_flag("--json", opts->json,
                "one JSON object: {\"name\",\"title\",\"topology\",\"parts\":[{\"title\",\"steps\":"
                "[{\"kind\",\"who\",\"text\",\"smi\"?}],\"processes\":[...],\"smi\":{...}}]}");
  run->footer("See the machine at the end: furnace smi --scenario NAME");
  run->callback([opts] {
    const MachineScenarioResult r = run_machine_scenario(opts->name, opts->topology);
    if (opts->json) {
      std::printf("%s\n", to_json(r).dump().c_str());
    } else {
      print_text(r);
    }
  });
}

}  // namespace furnace::cli
