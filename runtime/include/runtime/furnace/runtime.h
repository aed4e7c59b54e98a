// furnace/runtime.h: one process's view of its devices: a backend, a caching allocator per
// device, and the TraceBus every layer reports to. The torch.cuda-style device API lives here.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "furnace/allocator.h"
#include "furnace/backend.h"
#include "furnace/trace.h"

namespace furnace {

// cudaMemGetInfo / torch.cuda.mem_get_info: the device's free and total bytes, all processes.
struct MemInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// The logical devices that exist in a process that sees `n`, for error messages: "no cuda:N
// exists", "only cuda:0 exists", "only cuda:0..3 exist".
std::string existing_ordinals(int n);

class Runtime {
 public:
  // Builds the runtime over `backend`, reporting to `trace` (which must outlive it).
  Runtime(std::unique_ptr<Backend> backend, TraceBus& trace);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Backend& backend() { return *backend_; }
  TraceBus& trace() { return trace_; }
  // The caching allocator of cuda:`device` (a first device use). Throws "CUDA error: invalid
  // device ordinal" for a device this process does not see.
  CachingAllocator& allocator(int device);

  // ---- the torch.cuda device API -------------------------------------------------------------
  // As in PyTorch, device_count() and the memory statistics do not initialise CUDA (before the
  // first device use they follow the current environment, and the statistics are 0); every other
  // call is a first device use: it fixes the process's CUDA_VISIBLE_DEVICES mapping and throws
  // "No CUDA GPUs are available" when the process sees none. Messages are PyTorch's.
  int device_count() const { return backend_->device_count(); }
  bool is_initialized() const;  // torch.cuda.is_initialized()
  void init();                  // torch.cuda.init()
  int current_device();         // torch.cuda.current_device(): 0 until set_device
  // torch.cuda.set_device: makes `device` current and creates this process's CUDA context on it.
  // A negative device is a no-op, as in PyTorch.
  void set_device(int device);
  // torch.cuda.get_device_properties: name, total memory, SMs, compute capability, UUID, bus id.
  const GpuSpec& get_device_properties(int device);
  MemInfo mem_get_info(int device);  // creates the context on `device` (cudaMemGetInfo needs one)
  MemInfo mem_get_info() { return mem_get_info(current_device()); }

  // torch.cuda.memory_allocated(device) and friends; the overloads without a device use the
  // current one. Out of range after initialisation: "Invalid device argument N: did you call init?".
  size_t memory_allocated(int device);
  size_t memory_reserved(int device);
  size_t max_memory_allocated(int device);
  size_t max_memory_reserved(int device);
  size_t memory_allocated() { return memory_allocated(current_device_or_zero()); }
  size_t memory_reserved() { return memory_reserved(current_device_or_zero()); }
  size_t max_memory_allocated() { return max_memory_allocated(current_device_or_zero()); }
  size_t max_memory_reserved() { return max_memory_reserved(current_device_or_zero()); }
  void empty_cache(int device);  // that device's cache; nothing before initialisation
  void empty_cache();            // torch.cuda.empty_cache(): every device's cache

  // The GEMM library's workspace on `device` (OpTable::gemm_workspace_bytes; cuBLAS's on a GPU,
  // none on the simulator): allocated from the device's caching allocator before the device's
  // first GEMM, as PyTorch's getCurrentCUDABlasHandle does, and kept until the runtime ends
  // (empty_cache does not release it). The ops call it before every GEMM; after the first it is
  // one atomic load.
  void ensure_gemm_workspace(int device);

  // Which GPUs this process sees, for messages (backend.h, Backend::describe_devices).
  std::string describe_devices() const { return backend_->describe_devices(); }

 private:
  const CachingAllocator* stats_allocator(int device);  // nullptr before initialisation
  int current_device_or_zero() const { return current_device_.load(); }
  void check_ordinal(int device, const char* call);  // call "": a tensor on cuda:N
  void create_allocators();

  std::unique_ptr<Backend> backend_;
  TraceBus& trace_;
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
  std::unique_ptr<std::atomic<bool>[]> gemm_workspace_ready_;  // per device
  std::vector<void*> gemm_workspaces_;                         // per device; under init_mutex_
  mutable std::mutex init_mutex_;
  std::atomic<bool> initialized_{false};
  std::atomic<int> current_device_{0};
};

}  // namespace furnace
