// furnace/machine_scenarios.h: stories of several processes sharing one simulated machine, from
// the article in shared/seed/ (section 3): two jobs on disjoint GPUs, and select_least_used_gpu
// with its two traps next to a version that works, the race that version leaves when two jobs
// start at once, and a launcher that hands out the GPUs. Each scenario really runs: processes with
// their own environments on a SimMachine, each training model replicas on the GPUs it sees; the
// result is a list of steps (the shell and Python lines of the article, what they print, notes)
// and nvidia-smi's view at the end. The CLI (`furnace scenario`, `furnace smi --scenario`), the
// tests and later the lessons read it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "furnace/sim_machine.h"  // defines: SmiSnapshot
#include "furnace/visibility.h"   // defines: Visibility

namespace furnace {

struct ScenarioStep {
  enum class Kind { shell, code, output, note, smi };
  Kind kind = Kind::note;
  std::string who;   // the process it concerns ("train_a.py (pid 4001)"); empty for the narrator
  std::string text;  // shell: a command; code: Python (may span lines); output; note
  std::optional<SmiSnapshot> smi;  // kind smi: nvidia-smi at that moment
};
const char* scenario_step_kind_name(ScenarioStep::Kind k);  // "shell", "code", ...

// One process alive at the end of a part, as its own Runtime reports it.
struct ScenarioProcess {
  int pid = 0;
  std::string name;
  std::map<std::string, std::string> env;  // its environment at the end
  Visibility visibility;                    // what it sees (frozen at its first device use)
  struct Device {
    int ordinal = 0, physical_index = 0;
    uint64_t context_bytes = 0;    // its CUDA context on that GPU
    uint64_t reserved_bytes = 0;   // torch.cuda.memory_reserved(ordinal)
    uint64_t allocated_bytes = 0;  // torch.cuda.memory_allocated(ordinal)
  };
  std::vector<Device> devices;
};

struct ScenarioPart {
  std::string title;
  std::vector<ScenarioStep> steps;
  std::vector<ScenarioProcess> processes;  // alive at the end of the part
  SmiSnapshot smi;                         // nvidia-smi at the end of the part
};

struct MachineScenarioResult {
  std::string name, title, topology;
  std::vector<ScenarioPart> parts;
};

// name -> one-line description, in a fixed order ("two-jobs", "select-gpu").
std::vector<std::pair<std::string, std::string>> machine_scenarios();

// Runs scenario `name` on `topology` (empty: workstation-4x3090, the article's 4-GPU server).
// Throws one line for an unknown name or a machine with fewer than 4 GPUs.
MachineScenarioResult run_machine_scenario(const std::string& name, const std::string& topology = "");

}  // namespace furnace
