// furnace/raw_allocator.h: the raw device memory a backend hands out (cudaMalloc, or host memory in
// the simulator), under PyTorch's caching allocator (furnace/allocator.h, one layer up).
#pragma once

#include <cstddef>

namespace furnace {

// What cudaMalloc/cudaFree/cudaMemGetInfo are to PyTorch's allocator.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  // Returns nullptr when the device has no room (as cudaMalloc returns cudaErrorMemoryAllocation).
  virtual void* raw_malloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr, size_t bytes) = 0;
  // cudaMemGetInfo: free and total bytes of the device as the driver sees them (all processes).
  virtual void mem_get_info(size_t* free_bytes, size_t* total_bytes) = 0;
  // Memory this process holds on the device outside the caching allocator (its CUDA context).
  virtual size_t process_overhead_bytes() { return 0; }
  virtual void synchronize() {}
};

}  // namespace furnace
