// furnace/sim_machine.h: one simulated machine shared by several simulated processes, the way
// jobs share a real GPU server. Each process has its own environment (CUDA_VISIBLE_DEVICES,
// CUDA_DEVICE_ORDER) and its own view of the machine (a Backend: its visible GPUs as
// cuda:0..n-1, fixed at its first device use); all of them share each physical GPU's memory:
// the GPU's capacity minus each process's CUDA context minus every process's cudaMalloc'd
// segments (what their caching allocators reserve). smi() is nvidia-smi's view of it.
// Not here: a single process alone on a machine (make_sim_backend, make_backend in backend.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "furnace/backend.h"   // defines: Backend
#include "furnace/process.h"   // defines: Process, Environment
#include "furnace/topology.h"  // defines: Topology

namespace furnace {

class TraceBus;

// One row of nvidia-smi's process table.
struct SmiProcess {
  int pid = 0;
  std::string name;
  uint64_t used_bytes = 0;      // context_bytes + reserved_bytes: what nvidia-smi shows
  uint64_t context_bytes = 0;   // the process's CUDA context on this GPU
  uint64_t reserved_bytes = 0;  // segments its caching allocator holds (torch.cuda.memory_reserved)
};

struct SmiGpu {
  int index = 0;  // nvidia-smi's GPU number: PCI bus order
  std::string name, uuid, pci_bus_id;
  uint64_t total_bytes = 0;
  uint64_t used_bytes = 0;       // the sum over `processes`
  int utilization_percent = 0;   // kernel-busy share of SmiSnapshot::window_s
  std::vector<SmiProcess> processes;  // by pid
};

struct SmiSnapshot {
  std::string topology;
  // nvidia-smi samples utilization over 1/6 s to 1 s; the simulator reports it over the modelled
  // time since the machine started (the latest end of any kernel on any GPU).
  double window_s = 0;
  std::vector<SmiGpu> gpus;
};

class SimMachine {
 public:
  explicit SimMachine(Topology topology);
  ~SimMachine();
  SimMachine(const SimMachine&) = delete;
  SimMachine& operator=(const SimMachine&) = delete;

  const Topology& topology() const;

  // Starts a process named `name` (shown by smi) with environment `env`; pids count up from 4001.
  // The machine owns it.
  Process& spawn(std::string name, Environment env = {});

  // `process`'s view of the machine: its devices are the GPUs its environment makes visible at
  // its first device use (Runtime initialises lazily, as torch.cuda does). When the backend is
  // destroyed the process exits: its contexts go away. The machine must outlive it.
  std::unique_ptr<Backend> attach(Process& process, TraceBus* trace);

  // What nvidia-smi would show now.
  SmiSnapshot smi() const;

  struct Impl;  // backend/sim/sim_machine_impl.h
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace furnace
