// furnace/process.h: one (simulated) process: its environment, a pid, and the device visibility
// the CUDA driver fixes at its first device use. Several processes can share one machine
// (furnace/sim_machine.h). Not here: the parsing rules (furnace/visibility.h).
//
// When CUDA_VISIBLE_DEVICES is read (semantics.md section 1, pitfalls.md 1): the driver reads it
// once, when CUDA initialises in the process; changing os.environ afterwards changes nothing.
// Before that moment PyTorch (1.13 and later) counts devices through NVML and re-reads the
// variable on every torch.cuda.device_count(), so a Process recomputes its visibility from its
// current environment until initialize() freezes it.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "furnace/topology.h"    // defines: GpuSpec
#include "furnace/visibility.h"  // defines: Visibility, DeviceOrder

namespace furnace {

inline constexpr const char* kCudaVisibleDevices = "CUDA_VISIBLE_DEVICES";
inline constexpr const char* kCudaDeviceOrder = "CUDA_DEVICE_ORDER";

// A process's environment; a variable that is not set is absent.
using Environment = std::map<std::string, std::string>;

// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER from this (real) process's environment, where set.
Environment cuda_environment_from_os();

// "CUDA_VISIBLE_DEVICES=2,3, CUDA_DEVICE_ORDER=PCI_BUS_ID"; "CUDA_VISIBLE_DEVICES='', ..." when
// set but empty; "CUDA_VISIBLE_DEVICES not set, ...".
std::string describe_cuda_environment(const Environment& env);

// What the driver makes of `env` on a machine with physical GPUs `gpus`: CUDA_DEVICE_ORDER (unset:
// FASTEST_FIRST; an unknown value is ignored like unset, with a note) then CUDA_VISIBLE_DEVICES.
Visibility resolve_visibility(const std::vector<GpuSpec>& gpus, const Environment& env);

class Process {
 public:
  // `gpus`: the machine's physical GPUs in PCI bus order.
  Process(int pid, std::string name, Environment env, std::vector<GpuSpec> gpus);
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  int pid() const { return pid_; }
  const std::string& name() const { return name_; }
  const std::vector<GpuSpec>& gpus() const { return gpus_; }

  // os.environ: reading and changing it works at any time; only its effect on CUDA is frozen.
  Environment environment() const;
  std::optional<std::string> getenv(const std::string& key) const;
  void setenv(const std::string& key, std::string value);
  void unsetenv(const std::string& key);

  // True after the first device use.
  bool initialized() const;
  // What the process sees: before the first device use, computed from the current environment
  // (every call); after it, the mapping fixed then, with a note when the environment has changed
  // since ("frozen").
  Visibility visibility() const;
  // The first device use (cuInit): fixes the visibility from the environment as it is now.
  // Later calls return the same mapping. Thread-safe.
  Visibility initialize();

 private:
  const int pid_;
  const std::string name_;
  const std::vector<GpuSpec> gpus_;
  mutable std::mutex mu_;
  Environment env_;
  std::optional<Visibility> frozen_;
  Environment env_at_init_;
};

}  // namespace furnace
