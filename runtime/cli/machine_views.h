// Text and JSON views shared by `furnace devices`, `furnace smi` and `furnace scenario`: the
// nvidia-smi table of a simulated machine and a process's device mapping. Defined in
// smi_command.cpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "furnace/sim_machine.h"  // defines: SmiSnapshot
#include "furnace/visibility.h"   // defines: Visibility

namespace furnace::cli {

// nvidia-smi's two tables (GPUs, processes), each line ending in '\n'.
std::string smi_table(const SmiSnapshot& s);
// {"topology","window_s","gpus":[{"index","name","uuid","pci_bus_id","memory_total_bytes",
//  "memory_used_bytes","utilization_percent","processes":[{"pid","name","used_bytes",
//  "context_bytes","reserved_bytes"}]}]}
nlohmann::json smi_json(const SmiSnapshot& s);
// {"visible":[{"ordinal","physical_index","entry"}],"stop","stop_entry","notes":[...]}
nlohmann::json visibility_json(const Visibility& v);

}  // namespace furnace::cli
