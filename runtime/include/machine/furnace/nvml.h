// furnace/nvml.h: the physical GPUs of the real machine, as nvidia-smi sees them, through NVML
// loaded at run time (dlopen("libnvidia-ml.so.1")): no link-time dependency, so this builds and
// runs everywhere and simply reports "not available" without an NVIDIA driver. NVML numbers GPUs
// in PCI bus order and ignores CUDA_VISIBLE_DEVICES (semantics.md section 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "furnace/topology.h"  // defines: GpuSpec

namespace furnace {

struct NvmlGpu {
  GpuSpec spec;               // name, uuid, pci_bus_id, memory_bytes (the rest stays 0)
  uint64_t used_bytes = 0;    // nvmlDeviceGetMemoryInfo: memory in use by every process
  int utilization_percent = -1;  // nvmlDeviceGetUtilizationRates().gpu; -1 when not supported
};

struct NvmlQuery {
  bool available = false;
  std::string error;           // why not, when !available ("libnvidia-ml.so.1: cannot open ...")
  std::string driver_version;  // "550.54.15"
  std::vector<NvmlGpu> gpus;   // NVML index order (PCI bus order in practice)
};

// Initialises NVML, reads every GPU, shuts NVML down. Never throws.
NvmlQuery query_nvml();

}  // namespace furnace
