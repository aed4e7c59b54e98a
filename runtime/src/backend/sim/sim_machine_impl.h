// backend/sim: the shared state of a simulated machine: per physical GPU, who holds which memory
// (contexts and cudaMalloc'd segments, by pid) and how long kernels kept it busy. One lock for
// the whole machine; every call is short.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "furnace/sim_machine.h"

namespace furnace {

struct SimMachine::Impl {
  explicit Impl(Topology t);

  // The CUDA context of process `pid` on physical GPU `gpu`, created on first use. Throws
  // "CUDA error: out of memory" when the GPU has no room left for it.
  void ensure_context(int gpu, int pid);
  uint64_t context_of(int gpu, int pid) const;
  // cudaMalloc / cudaFree on the shared GPU memory: nullptr when the GPU is full.
  void* malloc(int gpu, int pid, size_t bytes);
  void free(int gpu, int pid, void* ptr, size_t bytes);
  // cudaMemGetInfo: free is what every process together has left.
  void mem_get_info(int gpu, size_t* free_bytes, size_t* total_bytes) const;
  // A kernel of `seconds` that ended at modelled time `end_s` on `gpu` (for GPU-Util).
  void record_kernel(int gpu, double seconds, double end_s);
  // The process is gone: its contexts are released (its segments must be freed already).
  void exit(int pid);
  const std::string& process_name(int pid) const;

  Topology topology;
  std::deque<std::unique_ptr<Process>> processes;
  int next_pid = 4001;

  struct Use {
    uint64_t context = 0;
    uint64_t reserved = 0;
  };
  struct Gpu {
    uint64_t used = 0;  // contexts + segments of every process
    std::map<int, Use> by_pid;
    double busy_s = 0, end_s = 0;
  };
  mutable std::mutex mu;
  std::vector<Gpu> gpus;
};

// One process with environment `env` alone on a private machine of `topology` (backend.h,
// make_backend with an environment).
std::unique_ptr<Backend> make_sim_process_backend(const Topology& topology, TraceBus* trace,
                                                  const Environment& env);

}  // namespace furnace
