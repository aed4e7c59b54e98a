// `furnace devices`: the physical GPUs (nvidia-smi's numbers, PCI bus order) and, under
// CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER from the environment or the flags, which cuda:N each
// visible one becomes and why the list stopped where it did. --later shows that a change after
// the first device use does nothing. --backend cuda reads the real machine: physical GPUs from
// NVML, logical ones from the CUDA runtime, matched by UUID. Not here: the rules
// (runtime/src/machine/visibility.cpp).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"    // defines: cuda_environment
#include "commands.h"       // defines: add_devices_command
#include "machine_views.h"  // defines: visibility_json
#include "text_table.h"     // defines: format_table
#include "furnace/backend.h"     // defines: discover_hardware_devices
#include "furnace/error.h"       // defines: FURNACE_CHECK, Error
#include "furnace/process.h"     // defines: Process, Environment, resolve_visibility
#include "furnace/topology.h"    // defines: load_topology
#include "furnace/visibility.h"  // defines: Visibility, check_visible_devices_flag

namespace furnace::cli {
namespace {

struct DevicesOptions {
  std::string topology = "workstation-4x3090";
  std::string backend = "sim";
  std::optional<std::string> visible, order, later;
  bool json = false;
};

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + "MiB"; }

std::optional<std::string> env_value(const Environment& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
}

nlohmann::json json_or_null(const std::optional<std::string>& v) {
  return v ? nlohmann::json(printable(*v)) : nlohmann::json();
}

nlohmann::json physical_json(const std::vector<GpuSpec>& gpus) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < gpus.size(); ++i)
    out.push_back({{"index", i},
                   {"name", gpus[i].name},
                   {"uuid", gpus[i].uuid},
                   {"pci_bus_id", gpus[i].pci_bus_id},
                   {"memory_bytes", gpus[i].memory_bytes}});
  return out;
}

// The physical table with a last column saying what this process calls each GPU.
void print_physical(const std::vector<GpuSpec>& gpus, const std::vector<std::string>& seen_as) {
  std::vector<std::vector<std::string>> rows{{"GPU", "Name", "Bus-Id", "UUID", "Memory", "CUDA sees it as"}};
  for (size_t i = 0; i < gpus.size(); ++i)
    rows.push_back({std::to_string(i), gpus[i].name, gpus[i].pci_bus_id, gpus[i].uuid,
                    mib(gpus[i].memory_bytes), seen_as[i]});
  std::printf("%s", format_table(rows, {.right = {true, false, false, false, true, false}}).c_str());
}

std::vector<std::string> seen_as(size_t n, const std::vector<int>& logical_to_physical) {
  std::vector<std::string> out(n, "hidden");
  for (size_t d = 0; d < logical_to_physical.size(); ++d)
    if (logical_to_physical[d] >= 0 && static_cast<size_t>(logical_to_physical[d]) < n)
      out[static_cast<size_t>(logical_to_physical[d])] = "cuda:" + std::to_string(d);
  return out;
}

void print_notes(const std::vector<std::string>& notes) {
  std::printf("\nwhy:\n");
  for (const std::string& n : notes) std::printf("  - %s\n", n.c_str());
}

std::string source(const char* key, const std::optional<std::string>& flag_value,
                   const Environment& env, const char* flag) {
  const std::optional<std::string> v = env_value(env, key);
  std::string s = std::string(key) + (v ? "=" + printable(*v) : std::string(" not set"));
  if (flag_value) s += std::string(" (") + flag + ")";
  else if (v) s += " (from the environment)";
  return s;
}

void run_sim(const DevicesOptions& o, const Environment& env) {
  const Topology topo = load_topology(o.topology);
  Process p(1, "furnace devices", env, topo.gpus);
  Visibility v = p.initialize();  // the first device use: CUDA reads the variables now
  if (o.later) {
    p.setenv(kCudaVisibleDevices, *o.later);
    v = p.visibility();
  }
  std::vector<int> map;
  for (const VisibleDevice& d : v.devices) map.push_back(d.physical_index);

  if (o.json) {
    nlohmann::json j = visibility_json(v);
    j["topology"] = topo.name;
    j["backend"] = "sim";
    j["cuda_visible_devices"] = json_or_null(env_value(env, kCudaVisibleDevices));
    j["cuda_device_order"] = json_or_null(env_value(env, kCudaDeviceOrder));
    j["physical"] = physical_json(topo.gpus);
    j["frozen"] = o.later.has_value();
    if (o.later) j["later"] = printable(*o.later);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s: %zu simulated GPU%s\n  %s\n  %s\n", topo.name.c_str(), topo.gpus.size(),
              topo.gpus.size() == 1 ? "" : "s",
              source(kCudaVisibleDevices, o.visible, env, "--visible").c_str(),
              source(kCudaDeviceOrder, o.order, env, "--order").c_str());
  if (o.later)
    std::printf("  then, after the first device use: os.environ['CUDA_VISIBLE_DEVICES'] = '%s'\n",
                printable(*o.later).c_str());
  std::printf("\nphysical GPUs (nvidia-smi's numbers: PCI bus order)\n");
  print_physical(topo.gpus, seen_as(topo.gpus.size(), map));
  std::printf("\nthis process sees %d device%s%s%s\n", v.count(), v.count() == 1 ? "" : "s",
              v.count() ? ": " : "", v.count() ? v.mapping_text().c_str() : "");
  print_notes(v.notes);
}

void run_cuda(const DevicesOptions& o, const Environment& env) {
  // Export the flags before the CUDA runtime starts: the driver reads the real environment.
  for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
  const HardwareDevices h = discover_hardware_devices();
  FURNACE_CHECK(h.nvml_available)
      << "--backend cuda: NVML is not available (" << h.nvml_error
      << "): no NVIDIA driver on this machine; the simulator needs none (--backend sim)";
  // Furnace's prediction from the same physical GPUs. NVML gives no FP32 peak, so FASTEST_FIRST
  // falls back to PCI order here: what drivers do in practice on identical GPUs, though NVIDIA
  // promises only the first place (the comparison with the driver's map below says which).
  const Visibility predicted = resolve_visibility(h.physical, env);
  std::vector<std::string> notes;
  if (!h.cuda_available) notes.push_back("the CUDA runtime sees no device: " + h.cuda_error);
  std::vector<int> predicted_map;
  for (const VisibleDevice& d : predicted.devices) predicted_map.push_back(d.physical_index);
  const bool agree = predicted_map == h.logical_to_physical;
  notes.push_back(agree ? "Furnace's parser predicts the same mapping from NVML's GPUs: " +
                              predicted.mapping_text()
                        : "Furnace's parser predicts a different mapping: " + predicted.mapping_text() +
                              " (the driver is the truth; please report this)");
  for (const std::string& n : predicted.notes) notes.push_back("prediction: " + n);

  if (o.json) {
    nlohmann::json visible = nlohmann::json::array();
    for (size_t d = 0; d < h.logical.size(); ++d)
      visible.push_back({{"ordinal", d}, {"physical_index", h.logical_to_physical[d]},
                         {"name", h.logical[d].name}, {"uuid", h.logical[d].uuid}});
    nlohmann::json j{{"backend", "cuda"},
                     {"cuda_visible_devices", json_or_null(env_value(env, kCudaVisibleDevices))},
                     {"cuda_device_order", json_or_null(env_value(env, kCudaDeviceOrder))},
                     {"physical", physical_json(h.physical)},
                     {"visible", visible},
                     {"predicted", visibility_json(predicted)["visible"]},
                     {"agree", agree},
                     {"notes", notes}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("this machine: %zu NVIDIA GPU%s (NVML)\n  %s\n  %s\n", h.physical.size(),
              h.physical.size() == 1 ? "" : "s",
              source(kCudaVisibleDevices, o.visible, env, "--visible").c_str(),
              source(kCudaDeviceOrder, o.order, env, "--order").c_str());
  std::printf("\nphysical GPUs (NVML: PCI bus order, ignores CUDA_VISIBLE_DEVICES)\n");
  print_physical(h.physical, seen_as(h.physical.size(), h.logical_to_physical));
  std::printf("\nthe CUDA runtime sees %zu device%s\n", h.logical.size(), h.logical.size() == 1 ? "" : "s");
  print_notes(notes);
}

}  // namespace

void add_devices_command(CLI::App& app) {
  auto opts = std::make_shared<DevicesOptions>();
  CLI::App* cmd = app.add_subcommand(
      "devices", "which GPUs a process sees under CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER, as "
                 "which cuda:N, and why");
  cmd->add_option("--topology", opts->topology, "machine: a name in data/topologies or a .toml path")
      ->capture_default_str();
  cmd->add_option_function<std::string>(
      "--visible", [opts](const std::string& v) { opts->visible = v; },
      "CUDA_VISIBLE_DEVICES for the process (default: this shell's): ordinals, GPU-UUID prefixes, MIG ids");
  cmd->add_option_function<std::string>(
      "--order", [opts](const std::string& v) { opts->order = v; },
      "CUDA_DEVICE_ORDER: FASTEST_FIRST (CUDA's default) or PCI_BUS_ID (default: this shell's)");
  cmd->add_option_function<std::string>(
      "--later", [opts](const std::string& v) { opts->later = v; },
      "set CUDA_VISIBLE_DEVICES to this after the first device use, as a script's os.environ[...] "
      "would, and see that the mapping stays frozen");
  cmd->add_option("--backend", opts->backend,
                  "sim (a simulated topology) or cuda (this machine: NVML + the CUDA runtime)")
      ->capture_default_str();
  cmd->add_flag("--json", opts->json,
                "one JSON object: {\"physical\":[{\"index\",\"name\",\"uuid\",\"pci_bus_id\","
                "\"memory_bytes\"}],\"visible\":[{\"ordinal\",\"physical_index\",...}],\"notes\":[...],...}");
  cmd->footer(
      "Examples:\n"
      "  furnace devices --visible 2,1\n"
      "  furnace devices --topology dgx-h100 --visible 0,2,-1,1\n"
      "  furnace devices --topology mixed-3090-3060 --order PCI_BUS_ID\n"
      "  furnace devices --visible 0,1 --later 2,3\n"
      "  CUDA_VISIBLE_DEVICES=GPU-38 furnace devices --json   (a UUID prefix: nvidia-smi -L lists them)");
  cmd->callback([opts] {
    if (opts->later) check_visible_devices_flag(*opts->later, "--later");
    const Environment env = cuda_environment(opts->visible, opts->order);
    if (opts->backend == "cuda") {
      FURNACE_CHECK(!opts->later) << "--later needs the simulator: a real process cannot be "
                                     "re-initialised from here (use --backend sim)";
      run_cuda(*opts, env);
    } else {
      FURNACE_CHECK(opts->backend == "sim")
          << "unknown backend '" << printable(opts->backend) << "' (choose sim or cuda)";
      run_sim(*opts, env);
    }
  });
}

}  // namespace furnace::cli
