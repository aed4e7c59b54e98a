// furnace/host_memory.h: how much host RAM a scenario needs on the simulator, which keeps every
// simulated GPU's tensors in host memory (pages are backed as ops write them), and the guard that
// refuses a scenario the machine cannot hold before it starts, instead of the kernel's OOM killer
// ending it halfway. Not here: GPU memory (the caching allocator raises PyTorch's OOM for that).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "furnace/train.h"  // defines: Scenario

namespace furnace {

struct HostMemoryPart {
  std::string what;  // "cuda:0 parameters", "dataset", ...
  uint64_t bytes = 0;
};

struct HostMemoryEstimate {
  std::vector<HostMemoryPart> parts;
  uint64_t total() const;
  std::string breakdown() const;  // "cuda:0 1.20 GiB (parameters 400.00 MiB, ...), dataset ..., ..."
};

// What a run of `sc` will hold in host memory at its peak: `process_bytes` (what the process
// holds already: code, libraries, the dataset; host_memory_resident()) plus, on each simulated
// device it uses (`devices`: DataParallel's device_ids, device_ids[0] first, else the one device,
// each with the bytes its simulated GPU can hold, since no device takes more than that before
// PyTorch's out-of-memory error stops the run), the parameters, gradients, momentum buffers,
// activations of its share of the batch and, for DataParallel, the replica's copies; the host's
// scratch for 16-bit matrix products under autocast; the loader's batches in flight; and the
// checkpoint's host copies when `checkpointing`.
HostMemoryEstimate estimate_host_memory(const Scenario& sc, const std::vector<int>& sizes,
                                        const std::vector<std::pair<int, uint64_t>>& devices,
                                        uint64_t process_bytes, bool checkpointing);

// This process's resident memory now (/proc/self/statm), in bytes; 0 when it cannot be read.
uint64_t host_memory_resident();

// MemAvailable from /proc/meminfo, in bytes; 0 when it cannot be read.
uint64_t host_memory_available();

// How much host memory this process may still use, and where that figure comes from.
struct HostMemoryBudget {
  uint64_t bytes = 0;
  std::string source;  // "MemAvailable in /proc/meminfo", "the cgroup's memory.max ...", "the limit RLIMIT_AS ..."
  bool known = false;  // false: no source could be read (source says so)
};

// The smallest of MemAvailable, the memory cgroup's limit minus its usage (v2 memory.max /
// memory.current or v1 memory.limit_in_bytes / memory.usage_in_bytes, of the process's cgroup and
// its ancestors) and RLIMIT_AS / RLIMIT_DATA minus what is mapped already and what
// `extra_threads` more threads and the BLAS library will reserve. Environment, for tests and odd
// machines: FURNACE_CGROUP_DIR (read the cgroup files from this folder instead),
// FURNACE_MEMINFO (a file to read instead of /proc/meminfo).
HostMemoryBudget host_memory_budget(int extra_threads = 0);

// With an unknown budget, scenarios up to this size still run; larger ones are refused.
inline constexpr uint64_t kUnknownBudgetAllowance = 1ull << 30;

// Throws one furnace::Error line with the estimate, its largest parts and the budget when the
// estimate exceeds it (or, with an unknown budget, exceeds kUnknownBudgetAllowance).
void check_host_memory(const HostMemoryEstimate& estimate, const HostMemoryBudget& budget);

}  // namespace furnace
