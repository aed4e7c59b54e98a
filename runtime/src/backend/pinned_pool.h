// backend/pinned_pool: page-locked host blocks for asynchronous host-to-device copies, reused once
// every copy that read them has finished. PyTorch's CachingHostAllocator in miniature: sizes are
// rounded up to a power of two (at least 4 KiB), a released block carries the event of the copy
// that reads it, and acquire() hands out a cached block only when that event has completed. Plain
// C++: the device runtime comes in through PinnedPool::Host (cudaHostAlloc, cudaEventQuery on the
// cuda backend; a fake in the tests).
// Header-only: the CPU tests and libfurnace_cuda (linked after libfurnace_runtime) both use it.
// Not here: the copies themselves (the backend), pinned memory for the DataLoader's own buffers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "furnace/error.h"

namespace furnace {

class PinnedPool {
 public:
  // What the pool needs from the device runtime. An event is an opaque handle owned by Host.
  class Host {
   public:
    virtual ~Host() = default;
    virtual void* alloc_pinned(size_t bytes) = 0;  // nullptr when the host has no room
    virtual void free_pinned(void* ptr) = 0;
    virtual bool event_done(void* event) = 0;      // the copy that read the block has finished
    virtual void wait_event(void* event) = 0;      // blocks until it has
    virtual void release_event(void* event) = 0;   // the pool no longer needs it
  };

  struct Stats {
    size_t reserved_bytes = 0;  // page-locked bytes held (free and in use)
    size_t blocks = 0;          // blocks held
    size_t in_use = 0;          // acquired and not yet released
    size_t pending = 0;         // released, waiting for their copy to finish
    int64_t allocations = 0;    // alloc_pinned calls that succeeded
    int64_t reuses = 0;         // acquires served from the cache
  };

  explicit PinnedPool(Host& host);
  // Waits for every pending copy, then frees every block (blocks still acquired are freed too).
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  static size_t round_size(size_t bytes);  // power of two, >= 4096

  // A block of at least `bytes`: a cached block whose copy has finished, else a new one. When the
  // host refuses a new block, waits for the pending copies, frees the idle blocks and tries once
  // more; returns nullptr if that fails too (the caller falls back to a pageable copy).
  void* acquire(size_t bytes);
  // Gives `block` back; it is reused once `event` (may be null: no copy pending) has completed.
  void release(void* block, void* event);
  Stats stats() const;

 private:
  struct Block {
    size_t size = 0;
    void* event = nullptr;  // the last copy reading it; null once done
    bool in_use = false;
  };
  // Moves every pending block whose event completed to the free lists. Caller holds mu_.
  void collect_finished();
  void free_idle_blocks();  // waits for pending copies, frees every block not in use

  Host& host_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;      // every block held
  std::multimap<size_t, void*> free_;            // size -> block, ready for reuse
  std::vector<void*> pending_;                   // released, event not yet complete
  Stats stats_;
};

// ---- implementation -----------------------------------------------------------------------------


inline PinnedPool::PinnedPool(Host& host) : host_(host) {}

inline PinnedPool::~PinnedPool() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [ptr, b] : blocks_) {
    if (b.event) {
      host_.wait_event(b.event);  // never free memory a copy may still read
      host_.release_event(b.event);
    }
    host_.free_pinned(ptr);
  }
}

inline size_t PinnedPool::round_size(size_t bytes) {
  size_t size = 4096;
  while (size < bytes) size <<= 1;
  return size;
}

inline void PinnedPool::collect_finished() {
  auto done = [&](void* ptr) {
    Block& b = blocks_.at(ptr);
    if (b.event && !host_.event_done(b.event)) return false;
    if (b.event) host_.release_event(b.event);
    b.event = nullptr;
    free_.emplace(b.size, ptr);
    return true;
  };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), done), pending_.end());
}

inline void PinnedPool::free_idle_blocks() {
  for (void* ptr : pending_) {
    Block& b = blocks_.at(ptr);
    host_.wait_event(b.event);
    host_.release_event(b.event);
    b.event = nullptr;
    free_.emplace(b.size, ptr);
  }
  pending_.clear();
  for (auto& [size, ptr] : free_) {
    host_.free_pinned(ptr);
    blocks_.erase(ptr);
    stats_.reserved_bytes -= size;
  }
  free_.clear();
}

inline void* PinnedPool::acquire(size_t bytes) {
  const size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  collect_finished();
  // Best fit among the blocks whose copies are done, but no more than twice the size needed, so a
  // small request does not pin down a big block.
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= 2 * size) {
    void* ptr = it->second;
    free_.erase(it);
    blocks_.at(ptr).in_use = true;
    ++stats_.reuses;
    return ptr;
  }
  void* ptr = host_.alloc_pinned(size);
  if (!ptr) {
    free_idle_blocks();
    ptr = host_.alloc_pinned(size);
    if (!ptr) return nullptr;
  }
  blocks_.emplace(ptr, Block{size, nullptr, true});
  stats_.reserved_bytes += size;
  ++stats_.allocations;
  return ptr;
}

inline void PinnedPool::release(void* block, void* event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(block);
  FURNACE_ASSERT(it != blocks_.end() && it->second.in_use)
      << "PinnedPool::release of a block it did not hand out";
  it->second.in_use = false;
  it->second.event = event;
  if (event)
    pending_.push_back(block);
  else
    free_.emplace(it->second.size, block);
}

inline PinnedPool::Stats PinnedPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.blocks = blocks_.size();
  s.pending = pending_.size();
  s.in_use = 0;
  for (const auto& [ptr, b] : blocks_) s.in_use += b.in_use ? 1 : 0;
  return s;
}


}  // namespace furnace
