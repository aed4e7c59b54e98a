// The CUDA caching allocator (PyTorch's native backend), over any RawAllocator.
// Not here: size printing and parsing (size_format.cpp), the raw device allocators (backends).
//
// Policy (the same rules as c10/cuda/CUDACachingAllocator.cpp; shared/reference/semantics.md §4):
//
// - Every request is rounded up to a multiple of 512 bytes (kMinBlockSize); below 512 it becomes
//   512. A request of 0 bytes returns nullptr and touches nothing.
// - Two pools. Rounded sizes of at most 1 MiB (kSmallSize, `<=`, so exactly 1 MiB is small) come
//   from the small pool, everything larger from the large pool.
// - When no cached block fits, a new segment is taken from the device (cudaMalloc):
//     small requests                     -> 2 MiB (kSmallBuffer);
//     large requests under 10 MiB        -> 20 MiB (kLargeBuffer);
//     requests of 10 MiB (kMinLargeAlloc) or more -> the request rounded up to 2 MiB (kRoundLarge).
// - A cached block is found by best fit: the smallest free block of the right pool *and the same
//   stream* that is at least as large as the request. Free blocks are ordered by
//   (stream, size, address); memory is never shared between streams.
// - The block found (or the new segment) is split when what would remain is worth keeping:
//     small pool: remaining >= 512;
//     large pool: remaining >  1 MiB (strictly; an 11 MiB request in its 12 MiB segment takes the
//                 whole segment, and allocated_bytes grows by 12 MiB).
//   An unsplit block goes whole to the request and is counted at its full size.
// - A freed block merges with its free neighbours (previous and next) in the same segment.
// - malloc, in order: cached block -> new segment -> on failure synchronize, release every cached
//   segment that is entirely free (both pools, all streams), num_alloc_retries += 1, try the new
//   segment once more -> on failure num_ooms += 1 and throw OutOfMemoryError with PyTorch's
//   message. The allocator is unchanged by a failed request and stays usable.
// - empty_cache() releases every segment that is entirely free; a segment holding any live block
//   stays reserved. Nothing else ever gives memory back, except the destructor.
// - Statistics follow torch.cuda.memory_stats(): allocated_bytes counts block sizes,
//   requested_bytes the unrounded requests, reserved_bytes the segments; inactive_split counts the
//   free blocks of segments that are split. Each counter is kept for all / small / large.
//
// Not modelled: max_split_size_mb, roundup_power2_divisions, garbage collection, memory fractions,
// expandable segments, CUDA graph private pools, cross-stream events (record_stream).
//
// Thread safety: one mutex around every operation. Trace events are emitted while it is held, so
// each device's events arrive in order; a trace subscriber must not call back into the allocator
// (the event carries allocated/reserved already).
#include "furnace/allocator.h"  // defines: RawAllocator, CachingAllocator, MemoryStats

#include <algorithm>
#include <cstdio>
#include <memory_resource>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "furnace/error.h"  // defines: Error, OutOfMemoryError, FURNACE_CHECK_DEVICE
#include "furnace/trace.h"  // defines: TraceBus, TraceEvent, EventKind

namespace furnace {

namespace {

constexpr size_t kMinBlockSize = 512;              // every block is a multiple of this
constexpr size_t kSmallSize = 1048576;             // largest request of the small pool (1 MiB)
constexpr size_t kSmallBuffer = 2097152;           // segment size of the small pool (2 MiB)
constexpr size_t kLargeBuffer = 20971520;          // segment size for 1-10 MiB requests (20 MiB)
constexpr size_t kMinLargeAlloc = 10485760;        // from here segments are sized to the request
constexpr size_t kRoundLarge = 2097152;            // ... rounded up to 2 MiB
constexpr size_t kMaxRequest = size_t(1) << 62;    // beyond this no device has room (and no overflow)
constexpr size_t kOneExaByte = size_t(1) << 60;    // allocate()'s "more than 1EB" check

// Index into the StatCounter[3] arrays of MemoryStats.
constexpr int kAll = 0, kSmallPool = 1, kLargePool = 2;

// A contiguous piece of a segment, free or handed out. Blocks of one segment form a doubly
// linked list in address order. Addresses are kept as integers: the raw allocator may hand out
// addresses nobody may dereference (the `memory` instrument does).
struct Block {
  uintptr_t addr = 0;
  size_t size = 0;
  size_t requested = 0;  // unrounded request size while allocated
  int stream = 0;
  bool small = false;
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

// Best-fit order: (stream, size, address).
struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    return std::tie(a->stream, a->size, a->addr) < std::tie(b->stream, b->size, b->addr);
  }
};
using FreeBlocks = std::pmr::set<Block*, BlockLess>;

int pool_index(bool small) { return small ? kSmallPool : kLargePool; }

// Adds `delta` to the all-pools counter and to the pool's counter.
void update(StatCounter (&stat)[3], bool small, int64_t delta) {
  if (delta == 0) return;
  for (int i : {kAll, pool_index(small)}) {
    if (delta > 0)
      stat[i].increase(delta);
    else
      stat[i].decrease(-delta);
  }
}

bool should_split(bool small, size_t remaining) {
  return small ? remaining >= kMinBlockSize : remaining > kSmallSize;
}

}  // namespace

// ---- StatCounter ----------------------------------------------------------------------------

void StatCounter::increase(int64_t n) {
  current += n;
  allocated += n;
  peak = std::max(peak, current);
}

void StatCounter::decrease(int64_t n) {
  current -= n;
  freed += n;
}

// ---- sizing rules ---------------------------------------------------------------------------

size_t allocator_round_size(size_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t allocator_segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

bool allocator_is_small(size_t rounded) { return rounded <= kSmallSize; }

// ---- the allocator --------------------------------------------------------------------------

struct CachingAllocator::Impl {
  RawAllocator& raw;
  int device;
  TraceBus* trace;
  mutable std::mutex mu;
  MemoryStats stats;
  // The Blocks, the free sets' nodes and `live`'s come from this pool, which keeps what is given
  // back for the next request: in a steady state the allocator allocates no host memory.
  std::pmr::unsynchronized_pool_resource nodes;
  FreeBlocks free_blocks[2]{FreeBlocks(&nodes), FreeBlocks(&nodes)};  // [0] small pool, [1] large pool
  std::pmr::unordered_map<uintptr_t, Block*> live{&nodes};            // allocated blocks by address

  Impl(RawAllocator& r, int d, TraceBus* t) : raw(r), device(d), trace(t) {}

  FreeBlocks& pool(bool small) { return free_blocks[small ? 0 : 1]; }
  Block* new_block() { return std::pmr::polymorphic_allocator<Block>(&nodes).new_object<Block>(); }
  void delete_block(Block* b) { std::pmr::polymorphic_allocator<Block>(&nodes).delete_object(b); }
  bool tracing() const { return trace != nullptr && trace->active(); }

  void emit(EventKind kind, const char* name, uint64_t bytes, int stream) const {
    TraceEvent e;
    e.kind = kind;
    e.name = name;
    e.device = device;
    e.stream = stream;
    e.start_s = trace->now(device);
    e.bytes = bytes;
    e.allocated = stats.allocated_bytes[kAll].current;
    e.reserved = stats.reserved_bytes[kAll].current;
    trace->emit(e);
  }

  // Best fit in the pool, same stream only; removes the block from the free set.
  Block* take_cached(bool small, int stream, size_t size) {
    FreeBlocks& blocks = pool(small);
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = blocks.lower_bound(&key);
    if (it == blocks.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    blocks.erase(it);
    return b;
  }

  // cudaMalloc of one segment; nullptr when the device has no room.
  Block* new_segment(size_t bytes, bool small, int stream) {
    if (bytes > kMaxRequest) return nullptr;
    void* p = raw.raw_malloc(bytes);
    if (p == nullptr) return nullptr;
    Block* b = new_block();
    b->addr = reinterpret_cast<uintptr_t>(p);
    b->size = bytes;
    b->stream = stream;
    b->small = small;
    stats.num_device_alloc += 1;
    update(stats.segment, small, 1);
    update(stats.reserved_bytes, small, static_cast<int64_t>(bytes));
    if (tracing()) emit(EventKind::segment_alloc, "segment_alloc", bytes, stream);
    return b;
  }

  // Gives every cached segment that is entirely free back to the device.
  void release_free_segments() {
    raw.synchronize();
    for (FreeBlocks& blocks : free_blocks) {
      for (auto it = blocks.begin(); it != blocks.end();) {
        Block* b = *it;
        if (b->is_split()) {
          ++it;
          continue;
        }
        raw.raw_free(reinterpret_cast<void*>(b->addr), b->size);
        it = blocks.erase(it);
        stats.num_device_free += 1;
        update(stats.segment, b->small, -1);
        update(stats.reserved_bytes, b->small, -static_cast<int64_t>(b->size));
        if (tracing()) emit(EventKind::segment_free, "segment_free", b->size, b->stream);
        delete_block(b);
      }
    }
  }

  // Hands out `b` (free, out of any free set) for a request of `size` rounded bytes.
  void* hand_out(Block* b, size_t size, size_t requested) {
    int64_t inactive_blocks = 0, inactive_bytes = 0;  // net change of inactive_split*
    if (b->is_split()) {  // a free block of a split segment stops being inactive
      inactive_blocks -= 1;
      inactive_bytes -= static_cast<int64_t>(b->size);
    }
    size_t remaining = b->size - size;
    if (should_split(b->small, remaining)) {
      Block* rest = new_block();
      rest->addr = b->addr + size;
      rest->size = remaining;
      rest->stream = b->stream;
      rest->small = b->small;
      rest->prev = b;
      rest->next = b->next;
      if (b->next) b->next->prev = rest;
      b->next = rest;
      b->size = size;
      pool(b->small).insert(rest);
      inactive_blocks += 1;
      inactive_bytes += static_cast<int64_t>(remaining);
    }
    update(stats.inactive_split, b->small, inactive_blocks);
    update(stats.inactive_split_bytes, b->small, inactive_bytes);

    b->allocated = true;
    b->requested = requested;
    live.emplace(b->addr, b);
    const auto size_i = static_cast<int64_t>(b->size);
    update(stats.allocation, b->small, 1);
    update(stats.active, b->small, 1);
    update(stats.allocated_bytes, b->small, size_i);
    update(stats.active_bytes, b->small, size_i);
    update(stats.requested_bytes, b->small, static_cast<int64_t>(requested));
    if (tracing()) emit(EventKind::alloc, "alloc", b->size, b->stream);
    return reinterpret_cast<void*>(b->addr);
  }

  // Absorbs the free neighbour `n` of `b` (n == b->prev or b->next) into `b`; returns its size.
  size_t absorb(Block* b, Block* n) {
    pool(n->small).erase(n);
    if (n == b->prev) {
      b->addr = n->addr;
      b->prev = n->prev;
      if (b->prev) b->prev->next = b;
    } else {
      b->next = n->next;
      if (b->next) b->next->prev = b;
    }
    size_t absorbed = n->size;
    b->size += absorbed;
    delete_block(n);
    return absorbed;
  }

  void give_back(Block* b) {
    const auto size_i = static_cast<int64_t>(b->size);
    const int stream = b->stream;
    b->allocated = false;
    update(stats.allocation, b->small, -1);
    update(stats.active, b->small, -1);
    update(stats.allocated_bytes, b->small, -size_i);
    update(stats.active_bytes, b->small, -size_i);
    update(stats.requested_bytes, b->small, -static_cast<int64_t>(b->requested));
    b->requested = 0;

    int64_t inactive_blocks = 0, inactive_bytes = 0;
    for (Block* n : {b->prev, b->next}) {
      if (n != nullptr && !n->allocated) {
        inactive_blocks -= 1;
        inactive_bytes -= static_cast<int64_t>(absorb(b, n));
      }
    }
    if (b->is_split()) {
      inactive_blocks += 1;
      inactive_bytes += static_cast<int64_t>(b->size);
    }
    update(stats.inactive_split, b->small, inactive_blocks);
    update(stats.inactive_split_bytes, b->small, inactive_bytes);
    pool(b->small).insert(b);
    if (tracing()) emit(EventKind::free, "free", static_cast<uint64_t>(size_i), stream);
  }

  [[noreturn]] void throw_oom(size_t alloc_size) {
    stats.num_ooms += 1;
    size_t device_free = 0, device_total = 0;
    raw.mem_get_info(&device_free, &device_total);
    const auto allocated = static_cast<uint64_t>(stats.allocated_bytes[kAll].current);
    const auto reserved = static_cast<uint64_t>(stats.reserved_bytes[kAll].current);
    const uint64_t in_use = raw.process_overhead_bytes() + reserved;
    std::string msg = "CUDA out of memory. Tried to allocate " + format_size(alloc_size) +
                      ". GPU " + std::to_string(device) + " has a total capacity of " +
                      format_size(device_total) + " of which " + format_size(device_free) +
                      " is free. Including non-PyTorch memory, this process has " +
                      format_size(in_use) + " memory in use. Of the allocated memory " +
                      format_size(allocated) + " is allocated by PyTorch, and " +
                      format_size(reserved - allocated) +
                      " is reserved by PyTorch but unallocated. If reserved but unallocated memory "
                      "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
                      "avoid fragmentation.  See documentation for Memory Management  "
                      "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";
    if (tracing()) emit(EventKind::oom, "oom", alloc_size, 0);
    throw OutOfMemoryError(std::move(msg), "CachingAllocator::allocate", __FILE__, __LINE__,
                           device);
  }

  // Every block, free or live, grouped by segment; used by the destructor only.
  void release_everything() noexcept {
    std::unordered_set<Block*> heads;
    auto add_head = [&](Block* b) {
      while (b->prev) b = b->prev;
      heads.insert(b);
    };
    for (FreeBlocks& blocks : free_blocks)
      for (Block* b : blocks) add_head(b);
    for (auto& [addr, b] : live) add_head(b);
    // Work still queued may use these segments (a kernel, an all-reduce on another stream):
    // cudaFree does not promise to wait for it.
    if (!heads.empty()) {
      try {
        raw.synchronize();
      } catch (...) {
        // A destructor must not throw: free them anyway, as before.
      }
    }
    for (Block* head : heads) {
      size_t total = 0;
      for (Block* b = head; b; b = b->next) total += b->size;
      try {
        raw.raw_free(reinterpret_cast<void*>(head->addr), total);
      } catch (...) {
        // A destructor must not throw; the device memory is lost with the allocator anyway.
      }
      for (Block* b = head; b;) {
        Block* next = b->next;
        delete_block(b);
        b = next;
      }
    }
    for (FreeBlocks& blocks : free_blocks) blocks.clear();
    live.clear();
  }
};

CachingAllocator::CachingAllocator(RawAllocator& raw, int device, TraceBus* trace)
    : impl_(std::make_unique<Impl>(raw, device, trace)) {}

// Returns every segment to the raw allocator, live blocks included: free tensors first.
CachingAllocator::~CachingAllocator() { impl_->release_everything(); }

void* CachingAllocator::allocate(size_t bytes, int stream) {
  // PyTorch's allocate() refuses 1 EiB (2^60 bytes) or more before anything else: no device, no
  // stats, no rounding (which could overflow near 2^64), only this line.
  if (bytes >= kOneExaByte)
    throw OutOfMemoryError("CUDA out of memory. Tried to allocate more than 1EB memory.",
                           "CachingAllocator::allocate", __FILE__, __LINE__, impl_->device);
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& m = *impl_;
  const size_t size = allocator_round_size(bytes);  // bytes < 2^60: no overflow
  const bool small = allocator_is_small(size);
  Block* b = m.take_cached(small, stream, size);
  if (b == nullptr) {
    const size_t segment = allocator_segment_size(size);
    b = m.new_segment(segment, small, stream);
    if (b == nullptr) {
      m.release_free_segments();
      m.stats.num_alloc_retries += 1;
      b = m.new_segment(segment, small, stream);
    }
    if (b == nullptr) m.throw_oom(segment);
  }
  return m.hand_out(b, size, bytes);
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& m = *impl_;
  auto it = m.live.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == m.live.end()) {
    char addr[32];
    std::snprintf(addr, sizeof addr, "%p", ptr);
    FURNACE_CHECK_DEVICE(false, m.device)
        << "deallocate: pointer " << addr << " was not allocated by the caching allocator of GPU "
        << m.device << ", or was already freed";
  }
  Block* b = it->second;
  m.live.erase(it);
  m.give_back(b);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->release_free_segments();
}

size_t CachingAllocator::memory_allocated() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<size_t>(impl_->stats.allocated_bytes[kAll].current);
}

size_t CachingAllocator::memory_reserved() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<size_t>(impl_->stats.reserved_bytes[kAll].current);
}

size_t CachingAllocator::max_memory_allocated() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<size_t>(impl_->stats.allocated_bytes[kAll].peak);
}

size_t CachingAllocator::max_memory_reserved() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<size_t>(impl_->stats.reserved_bytes[kAll].peak);
}

const MemoryStats& CachingAllocator::stats() const { return impl_->stats; }

MemoryStats CachingAllocator::stats_snapshot() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void CachingAllocator::reset_peak_memory_stats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  MemoryStats& s = impl_->stats;
  for (StatCounter* group : {s.allocation, s.segment, s.active, s.inactive_split,
                             s.allocated_bytes, s.reserved_bytes, s.active_bytes,
                             s.inactive_split_bytes, s.requested_bytes})
    for (int i = 0; i < 3; ++i) group[i].reset_peak();
}

void CachingAllocator::reset_accumulated_memory_stats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  MemoryStats& s = impl_->stats;
  for (StatCounter* group : {s.allocation, s.segment, s.active, s.inactive_split,
                             s.allocated_bytes, s.reserved_bytes, s.active_bytes,
                             s.inactive_split_bytes, s.requested_bytes})
    for (int i = 0; i < 3; ++i) group[i].allocated = group[i].freed = 0;
  s.num_alloc_retries = s.num_ooms = 0;
  s.num_device_alloc = s.num_device_free = 0;
}

int CachingAllocator::device() const { return impl_->device; }

}  // namespace furnace
