// replay.cpp: an allocation sequence replayed through the caching allocator, with a note per
// operation saying what the allocator did (which pool, a new segment or a cache hit, an OOM
// retry, what empty_cache released). Used by `furnace memory` and the memory lesson. Not here: the
// allocator's rules (caching_allocator.cpp).
#include <string>
#include <vector>

#include "furnace/allocator.h"  // defines: CachingAllocator, ReplayStep, replay_allocations

namespace furnace {
namespace {

std::string plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string alloc_note(size_t size, const MemoryStats& before, const MemoryStats& after) {
  if (size == 0) return "nothing: a 0-byte request gets a null pointer";
  const uint64_t block = static_cast<uint64_t>(after.allocated_bytes[0].current - before.allocated_bytes[0].current);
  const bool small = allocator_is_small(allocator_round_size(size));
  std::string note = "block " + format_size(block) + (small ? " (small pool)" : " (large pool)");
  if (after.num_alloc_retries > before.num_alloc_retries)
    note += ", device full: released " +
            plural(after.num_device_free - before.num_device_free, "cached segment") + " and retried";
  if (after.num_device_alloc > before.num_device_alloc) {
    note += ", new " + format_size(allocator_segment_size(allocator_round_size(size))) + " segment";
  } else {
    note += ", from the cache";
  }
  return note;
}

}  // namespace

void replay_allocations(CachingAllocator& alloc, const std::vector<uint64_t>& sizes,
                        const std::vector<int>& frees, bool empty_cache, std::vector<ReplayStep>& steps) {
  std::vector<void*> ptrs(sizes.size(), nullptr);
  auto release_all = [&] {
    for (void*& p : ptrs)
      if (p) alloc.deallocate(p), p = nullptr;
  };
  auto record = [&](const char* op, int index, uint64_t bytes, std::string note) {
    steps.push_back({op, index, bytes, alloc.memory_allocated(), alloc.memory_reserved(), std::move(note)});
  };
  try {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const MemoryStats before = alloc.stats();
      ptrs[i] = alloc.allocate(sizes[i]);
      record("alloc", static_cast<int>(i), sizes[i], alloc_note(sizes[i], before, alloc.stats()));
    }
    for (int i : frees) {
      const uint64_t before = alloc.memory_allocated();
      alloc.deallocate(ptrs[static_cast<size_t>(i)]);
      ptrs[static_cast<size_t>(i)] = nullptr;
      const uint64_t block = before - alloc.memory_allocated();
      record("free", i, sizes[static_cast<size_t>(i)],
             sizes[static_cast<size_t>(i)] == 0 ? "nothing to free"
                                                : "block " + format_size(block) + " back to the cache (still reserved)");
    }
    if (empty_cache) {
      const MemoryStats before = alloc.stats();
      alloc.empty_cache();
      const MemoryStats& after = alloc.stats();
      const uint64_t released = static_cast<uint64_t>(before.reserved_bytes[0].current - after.reserved_bytes[0].current);
      const int64_t segments = after.num_device_free - before.num_device_free;
      record("empty_cache", -1, released,
             segments == 0 ? "no segment is entirely free: nothing released"
                           : "released " + plural(segments, "entirely free segment"));
    }
  } catch (...) {
    release_all();
    throw;
  }
  release_all();
}

}  // namespace furnace
