// furnace/allocator.h: PyTorch's CUDA caching allocator, over any raw device allocator.
// The rules (rounding, small/large pools, segment sizes, block splitting, empty_cache, the
// statistics and the out-of-memory message) follow c10/cuda/CUDACachingAllocator.cpp; see
// shared/reference/semantics.md, section 4.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "furnace/raw_allocator.h"  // defines: RawAllocator
#include "furnace/size_format.h"    // defines: format_size, parse_size (for the allocator's users)

namespace furnace {

class TraceBus;

// One current/peak/allocated/freed quadruple, as in torch.cuda.memory_stats().
struct StatCounter {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void increase(int64_t n);
  void decrease(int64_t n);
  void reset_peak() { peak = current; }
};

struct MemoryStats {
  // index 0 = all, 1 = small_pool, 2 = large_pool
  StatCounter allocation[3], segment[3], active[3], inactive_split[3];
  StatCounter allocated_bytes[3], reserved_bytes[3], active_bytes[3], inactive_split_bytes[3];
  StatCounter requested_bytes[3];
  int64_t num_alloc_retries = 0, num_ooms = 0;
  int64_t num_device_alloc = 0, num_device_free = 0;
};

class CachingAllocator {
 public:
  // `device` is the ordinal used in messages and trace events.
  CachingAllocator(RawAllocator& raw, int device, TraceBus* trace = nullptr);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns device memory for `bytes` (0 is allowed and returns nullptr, as PyTorch does).
  // Throws furnace::OutOfMemoryError with PyTorch's message when the device is full.
  void* allocate(size_t bytes, int stream = 0);
  // Returns a block to the cache. Throws furnace::Error for a pointer it did not hand out.
  void deallocate(void* ptr);
  // Releases every cached segment that is entirely free.
  void empty_cache();

  size_t memory_allocated() const;      // allocated_bytes.all.current
  size_t memory_reserved() const;       // reserved_bytes.all.current
  size_t max_memory_allocated() const;  // allocated_bytes.all.peak
  size_t max_memory_reserved() const;   // reserved_bytes.all.peak
  const MemoryStats& stats() const;     // unlocked: read it only while no other thread allocates
  MemoryStats stats_snapshot() const;   // a copy taken under the lock (safe from any thread)
  void reset_peak_memory_stats();
  void reset_accumulated_memory_stats();
  int device() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Rounding rules, exposed for tests and the `memory` instrument.
size_t allocator_round_size(size_t bytes);        // 512-byte rounding (minimum 512)
size_t allocator_segment_size(size_t rounded);    // 2 MiB, 20 MiB, or rounded up to 2 MiB
bool allocator_is_small(size_t rounded);          // <= 1 MiB

// One operation of an allocation replay, with the statistics after it.
struct ReplayStep {
  std::string op;       // "alloc", "free", "empty_cache"
  int index = -1;       // into the sizes; -1 for empty_cache
  uint64_t bytes = 0;   // alloc/free: the requested size; empty_cache: the bytes released
  uint64_t allocated = 0, reserved = 0;  // memory_allocated / memory_reserved after it
  std::string note;     // what happened: block size, pool, new segment or cache hit, retries
};

// Replays, on `alloc`: every size of `sizes` allocated in order, then the indices `frees` (each
// at most once, checked by the caller) freed in that order, then empty_cache() if asked; appends
// one ReplayStep per operation to `steps`. An allocation that does not fit throws
// OutOfMemoryError with `steps` holding the operations done before it. Every block still held at
// the end (or at the error) is freed before returning. `furnace memory` and the memory lesson.
void replay_allocations(CachingAllocator& alloc, const std::vector<uint64_t>& sizes,
                        const std::vector<int>& frees, bool empty_cache, std::vector<ReplayStep>& steps);

}  // namespace furnace
