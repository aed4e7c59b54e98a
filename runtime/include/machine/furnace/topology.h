// furnace/topology.h: the description of a (simulated or real) multi-GPU machine.
// Loaded from data/topologies/*.toml; the figures there are published vendor numbers with sources.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "furnace/dtype.h"

namespace furnace {

struct GpuSpec {
  std::string name;          // "NVIDIA H100 80GB HBM3"
  std::string uuid;          // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string pci_bus_id;    // "00000000:1B:00.0" (nvidia-smi form)
  uint64_t memory_bytes = 0; // total memory as nvidia-smi reports it
  uint64_t context_bytes = 0;// modelled CUDA context (driver, kernels, cuBLAS workspace) per process
  int sm_count = 0;
  int compute_capability_major = 0, compute_capability_minor = 0;
  double peak_flops_f32 = 0;    // FLOP/s, FP32 non-tensor
  double peak_flops_f16 = 0;    // FLOP/s, FP16 tensor core, FP32 accumulate, dense
  double peak_flops_bf16 = 0;   // FLOP/s, BF16 tensor core, FP32 accumulate, dense
  double memory_bandwidth = 0;  // bytes/s, device memory (HBM / GDDR)
  double launch_latency_s = 0;  // per kernel launch

  double peak_flops(DType t) const;  // f16/bf16 -> tensor-core peak, everything else -> f32 peak
};

// `local` is never written in a topology file: it is what link_between(a, a) returns (a copy that
// stays in one GPU's memory).
enum class LinkKind { pcie, nvlink, local };

// A direct path between two GPUs (indices into Topology::gpus, physical/PCI order).
struct LinkSpec {
  int a = 0, b = 0;
  LinkKind kind = LinkKind::pcie;
  double bandwidth = 0;  // bytes/s, one direction
  double latency_s = 0;
};

struct HostLinkSpec {
  double pinned_bandwidth = 0;    // bytes/s host<->device from pinned memory
  double pageable_bandwidth = 0;  // bytes/s from pageable memory (staged through a driver buffer)
  double latency_s = 0;
};

struct Topology {
  std::string name;         // file stem, "workstation-4x3090"
  std::string description;
  std::string source;       // where the figures come from
  std::vector<GpuSpec> gpus;  // physical order = PCI bus order = nvidia-smi order
  std::vector<LinkSpec> links;
  HostLinkSpec host;

  // The link between two GPUs; when none is listed, peer traffic goes over PCIe through the host
  // (kind pcie, the host's pinned bandwidth and latency). a == b gives kind local with the GPU's
  // memory bandwidth and launch latency; such a copy reads and writes every byte, so a cost model
  // should charge it 2 * bytes. Throws for an index out of range.
  LinkSpec link_between(int a, int b) const;
};

// Loads a topology: `name_or_path` is a path to a .toml file or the stem of a file in the topology
// directory: $FURNACE_TOPOLOGY_DIR, else $FURNACE_DATA_DIR/topologies, else the installed
// data/topologies. The schema is documented in data/topologies/README.md.
// Throws furnace::Error with one clear line for a missing, unknown or malformed file.
Topology load_topology(const std::string& name_or_path);
Topology parse_topology(const std::string& toml_text, const std::string& origin);
std::vector<std::string> list_topologies();  // stems of the built-in files, sorted
std::string topology_dir();

LinkKind parse_link_kind(const std::string& s);  // "pcie" | "nvlink"; throws for anything else
const char* link_kind_name(LinkKind k);           // "pcie", "nvlink", "local"

}  // namespace furnace
