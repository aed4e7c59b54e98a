// furnace/runtime.h: one process's view of its devices: a backend, a caching allocator per
// device, and the TraceBus every layer reports to. The torch.cuda-style device API lives here.
#pragma once

#include <memory>
#include <vector>

#include "furnace/allocator.h"
#include "furnace/backend.h"
#include "furnace/trace.h"

namespace furnace {

class Runtime {
 public:
  // Builds the runtime over `backend`, reporting to `trace` (which must outlive it).
  Runtime(std::unique_ptr<Backend> backend, TraceBus& trace);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Backend& backend() { return *backend_; }
  TraceBus& trace() { return trace_; }
  int device_count() const { return backend_->device_count(); }
  CachingAllocator& allocator(int device);

  // torch.cuda.memory_allocated(device) and friends.
  size_t memory_allocated(int device) { return allocator(device).memory_allocated(); }
  size_t memory_reserved(int device) { return allocator(device).memory_reserved(); }
  size_t max_memory_allocated(int device) { return allocator(device).max_memory_allocated(); }
  size_t max_memory_reserved(int device) { return allocator(device).max_memory_reserved(); }
  void empty_cache(int device) { allocator(device).empty_cache(); }

 private:
  std::unique_ptr<Backend> backend_;
  TraceBus& trace_;
  std::vector<std::unique_ptr<CachingAllocator>> allocators_;
};

}  // namespace furnace
