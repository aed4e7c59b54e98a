// The caching allocator against PyTorch's rules (shared/reference/semantics.md §4), on a fake
// device with a capacity and on a gmock StrictMock raw allocator. No real device memory is used:
// the fake hands out addresses nobody dereferences.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "furnace/allocator.h"  // defines: CachingAllocator, RawAllocator, allocator_* rules
#include "furnace/error.h"      // defines: Error, OutOfMemoryError
#include "furnace/trace.h"      // defines: TraceBus, TraceEvent

namespace furnace {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::InSequence;
using ::testing::Return;
using ::testing::StrictMock;

constexpr size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

// A device with `capacity` bytes, `overhead` of them taken by the CUDA context. Tracks every
// segment so that tests can check what was given back.
class FakeDevice : public RawAllocator {
 public:
  explicit FakeDevice(size_t capacity, size_t overhead = 0)
      : capacity_(capacity), overhead_(overhead) {}

  void* raw_malloc(size_t bytes) override {
    if (overhead_ + used_ + bytes > capacity_) return nullptr;
    uintptr_t addr = next_;
    next_ += bytes + 64 * MiB;  // gaps, so neighbouring segments are never adjacent
    live_[addr] = bytes;
    used_ += bytes;
    ++mallocs;
    return reinterpret_cast<void*>(addr);
  }
  void raw_free(void* ptr, size_t bytes) override {
    auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
    ASSERT_NE(it, live_.end()) << "raw_free of a pointer the device did not hand out";
    ASSERT_EQ(it->second, bytes) << "raw_free with the wrong size";
    used_ -= bytes;
    live_.erase(it);
    ++frees;
    freed_sizes.push_back(bytes);
  }
  void mem_get_info(size_t* free_bytes, size_t* total_bytes) override {
    *free_bytes = capacity_ - overhead_ - used_;
    *total_bytes = capacity_;
  }
  size_t process_overhead_bytes() override { return overhead_; }
  void synchronize() override { ++syncs; }

  size_t used() const { return used_; }
  size_t segments() const { return live_.size(); }

  int mallocs = 0, frees = 0, syncs = 0;
  std::vector<size_t> freed_sizes;

 private:
  size_t capacity_, overhead_, used_ = 0;
  uintptr_t next_ = uintptr_t(1) << 40;
  std::map<uintptr_t, size_t> live_;
};

class MockRawAllocator : public RawAllocator {
 public:
  MOCK_METHOD(void*, raw_malloc, (size_t bytes), (override));
  MOCK_METHOD(void, raw_free, (void* ptr, size_t bytes), (override));
  MOCK_METHOD(void, mem_get_info, (size_t * free_bytes, size_t* total_bytes), (override));
};

void* fake_ptr(uintptr_t addr) { return reinterpret_cast<void*>(addr); }
uintptr_t addr_of(void* p) { return reinterpret_cast<uintptr_t>(p); }

// ---- the sizing table of semantics.md ----------------------------------------------------------

struct SizingRow {
  size_t request, rounded;
  bool small;
  size_t segment;
  bool split;
  size_t allocated, reserved;
};

class SizingTable : public ::testing::TestWithParam<SizingRow> {};

TEST_P(SizingTable, RoundingPoolSegmentAndStatsFromEmpty) {
  const SizingRow& row = GetParam();
  EXPECT_EQ(allocator_round_size(row.request), row.rounded);
  EXPECT_EQ(allocator_is_small(row.rounded), row.small);
  EXPECT_EQ(allocator_segment_size(row.rounded), row.segment);

  FakeDevice dev(8 * GiB);
  CachingAllocator alloc(dev, 0);
  void* p = alloc.allocate(row.request);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(alloc.memory_allocated(), row.allocated);
  EXPECT_EQ(alloc.memory_reserved(), row.reserved);
  EXPECT_EQ(dev.mallocs, 1);
  const MemoryStats& s = alloc.stats();
  const int pool = row.small ? 1 : 2, other = row.small ? 2 : 1;
  EXPECT_EQ(s.allocated_bytes[pool].current, static_cast<int64_t>(row.allocated));
  EXPECT_EQ(s.allocated_bytes[other].current, 0);
  EXPECT_EQ(s.reserved_bytes[pool].current, static_cast<int64_t>(row.reserved));
  EXPECT_EQ(s.requested_bytes[0].current, static_cast<int64_t>(row.request));
  EXPECT_EQ(s.inactive_split[0].current, row.split ? 1 : 0);
  EXPECT_EQ(s.inactive_split_bytes[0].current,
            static_cast<int64_t>(row.reserved - row.allocated));
  alloc.deallocate(p);
  EXPECT_EQ(alloc.memory_allocated(), 0u);
  EXPECT_EQ(alloc.memory_reserved(), row.reserved);  // cached, not returned
  EXPECT_EQ(s.inactive_split[0].current, 0);          // merged back into a whole segment
}

INSTANTIATE_TEST_SUITE_P(
    SemanticsMd, SizingTable,
    ::testing::Values(
        SizingRow{1, 512, true, 2 * MiB, true, 512, 2097152},
        SizingRow{513, 1024, true, 2 * MiB, true, 1024, 2097152},
        SizingRow{1048576, 1048576, true, 2 * MiB, true, 1048576, 2097152},
        SizingRow{1048577, 1049088, false, 20 * MiB, true, 1049088, 20971520},
        SizingRow{5 * MiB, 5 * MiB, false, 20 * MiB, true, 5242880, 20971520},
        SizingRow{10 * MiB, 10 * MiB, false, 10 * MiB, false, 10485760, 10485760},
        SizingRow{11 * MiB, 11 * MiB, false, 12 * MiB, false, 12582912, 12582912},
        SizingRow{13107200, 13107200, false, 14 * MiB, true, 13107200, 14680064},
        SizingRow{100 * MiB + 1, 104858112, false, 102 * MiB, true, 104858112, 106954752},
        // Beyond the table: same rules.
        SizingRow{512, 512, true, 2 * MiB, true, 512, 2 * MiB},
        SizingRow{19 * MiB, 19 * MiB, false, 20 * MiB, false, 20 * MiB, 20 * MiB},
        SizingRow{9 * MiB, 9 * MiB, false, 20 * MiB, true, 9 * MiB, 20 * MiB}));

TEST(CachingAllocatorRules, RoundSizeEdges) {
  EXPECT_EQ(allocator_round_size(0), 512u);
  EXPECT_EQ(allocator_round_size(511), 512u);
  EXPECT_EQ(allocator_round_size(512), 512u);
  EXPECT_EQ(allocator_round_size(1025), 1536u);
  EXPECT_TRUE(allocator_is_small(1 * MiB));
  EXPECT_FALSE(allocator_is_small(1 * MiB + 512));
  EXPECT_EQ(allocator_segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(allocator_segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(allocator_segment_size(10 * MiB + 512), 12 * MiB);
}

// ---- caching, splitting, merging -----------------------------------------------------------------

TEST(CachingAllocator, SameSizeTwiceIsOneRawMalloc) {
  StrictMock<MockRawAllocator> raw;
  void* seg = fake_ptr(0x10000000);
  EXPECT_CALL(raw, raw_malloc(2 * MiB)).WillOnce(Return(seg));
  EXPECT_CALL(raw, raw_free(seg, 2 * MiB)).Times(1);  // by the destructor
  CachingAllocator alloc(raw, 0);
  void* a = alloc.allocate(1000);
  EXPECT_EQ(a, seg);
  alloc.deallocate(a);
  void* b = alloc.allocate(1000);
  EXPECT_EQ(b, seg);  // the cache hit
  alloc.deallocate(b);
  EXPECT_EQ(alloc.stats().num_device_alloc, 1);
  EXPECT_EQ(alloc.stats().allocation[0].allocated, 2);
}

TEST(CachingAllocator, LargeRemainderIsSplitAndReused) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 0);
  void* a = alloc.allocate(1 * MiB + 1);  // 1049088 of a new 20 MiB segment
  void* b = alloc.allocate(5 * MiB);      // from the 19 MiB remainder
  EXPECT_EQ(dev.mallocs, 1);
  EXPECT_EQ(addr_of(b), addr_of(a) + 1049088);
  EXPECT_EQ(alloc.memory_allocated(), 1049088u + 5 * MiB);
  EXPECT_EQ(alloc.memory_reserved(), 20 * MiB);
  EXPECT_EQ(alloc.stats().inactive_split[2].current, 1);
  EXPECT_EQ(alloc.stats().inactive_split_bytes[2].current,
            static_cast<int64_t>(20 * MiB - 1049088 - 5 * MiB));
  // A third request larger than the rest of the segment needs a new one.
  void* c = alloc.allocate(15 * MiB);
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_EQ(alloc.memory_reserved(), 20 * MiB + 16 * MiB);
  for (void* p : {a, b, c}) alloc.deallocate(p);
}

TEST(CachingAllocator, SmallRemaindersAreSplitAndBestFitPicksTheSmallestHole) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 0);
  void* a = alloc.allocate(512);
  void* b = alloc.allocate(1024);
  void* c = alloc.allocate(512);
  void* d = alloc.allocate(2048);
  EXPECT_EQ(dev.mallocs, 1);
  EXPECT_EQ(addr_of(b), addr_of(a) + 512);
  EXPECT_EQ(addr_of(c), addr_of(a) + 1536);
  EXPECT_EQ(addr_of(d), addr_of(a) + 2048);
  alloc.deallocate(b);  // holes: 1024 at a+512, the tail of the segment
  void* e = alloc.allocate(600);  // rounds to 1024: the hole fits exactly
  EXPECT_EQ(e, b);
  alloc.deallocate(e);
  void* f = alloc.allocate(512);  // the 1024 hole is the smallest that fits; it is split
  EXPECT_EQ(f, b);
  void* g = alloc.allocate(512);  // the other half of the hole
  EXPECT_EQ(addr_of(g), addr_of(b) + 512);
  for (void* p : {a, c, d, f, g}) alloc.deallocate(p);
  EXPECT_EQ(alloc.stats().inactive_split[0].current, 0);
}

TEST(CachingAllocator, FreedBlocksMergeWithFreeNeighbours) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 0);
  void* a = alloc.allocate(512);
  void* b = alloc.allocate(512);
  void* c = alloc.allocate(512);
  const MemoryStats& s = alloc.stats();
  EXPECT_EQ(s.inactive_split[1].current, 1);  // the tail
  alloc.deallocate(b);
  EXPECT_EQ(s.inactive_split[1].current, 2);  // b and the tail, not adjacent
  alloc.deallocate(a);                         // merges with b (its next)
  EXPECT_EQ(s.inactive_split[1].current, 2);
  EXPECT_EQ(s.inactive_split_bytes[1].current, static_cast<int64_t>(2 * MiB - 512));
  void* ab = alloc.allocate(1024);  // exactly the merged a+b
  EXPECT_EQ(ab, a);
  alloc.deallocate(ab);
  alloc.deallocate(c);  // merges with a+b before it and the tail after it: one whole segment
  EXPECT_EQ(s.inactive_split[1].current, 0);
  EXPECT_EQ(s.inactive_split_bytes[1].current, 0);
  alloc.empty_cache();  // only possible if the segment is whole again
  EXPECT_EQ(alloc.memory_reserved(), 0u);
  EXPECT_EQ(dev.used(), 0u);
}

TEST(CachingAllocator, TenMiBTakesItsSegmentWhole) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 0);
  void* p = alloc.allocate(10 * MiB);
  EXPECT_EQ(alloc.memory_allocated(), 10 * MiB);
  EXPECT_EQ(alloc.memory_reserved(), 10 * MiB);
  EXPECT_EQ(alloc.stats().inactive_split[0].current, 0);
  alloc.deallocate(p);
}

TEST(CachingAllocator, ElevenMiBIsNotSplitBecauseOneMiBIsNotMoreThanOneMiB) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 0);
  void* p = alloc.allocate(11 * MiB);
  EXPECT_EQ(alloc.memory_allocated(), 12 * MiB);
  EXPECT_EQ(alloc.memory_reserved(), 12 * MiB);
  EXPECT_EQ(alloc.stats().requested_bytes[0].current, static_cast<int64_t>(11 * MiB));
  alloc.deallocate(p);
  // The cached 12 MiB block serves 11 MiB again whole, and 10.5 MiB with a 1.5 MiB split.
  void* q = alloc.allocate(11 * MiB);
  EXPECT_EQ(q, p);
  EXPECT_EQ(alloc.memory_allocated(), 12 * MiB);
  alloc.deallocate(q);
  void* r = alloc.allocate(10 * MiB + 512 * KiB);
  EXPECT_EQ(r, p);
  EXPECT_EQ(alloc.memory_allocated(), 10 * MiB + 512 * KiB);
  EXPECT_EQ(alloc.stats().inactive_split_bytes[2].current, static_cast<int64_t>(1536 * KiB));
  EXPECT_EQ(dev.mallocs, 1);
  alloc.deallocate(r);
}

TEST(CachingAllocator, EmptyCacheReleasesOnlyWhollyFreeSegments) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 0);
  void* small = alloc.allocate(4096);           // 2 MiB segment
  void* kept = alloc.allocate(5 * MiB);         // 20 MiB segment, stays live
  void* big = alloc.allocate(30 * MiB);         // 30 MiB segment
  void* neighbour = alloc.allocate(6 * MiB);    // same 20 MiB segment as `kept`
  EXPECT_EQ(dev.mallocs, 3);
  alloc.deallocate(small);
  alloc.deallocate(big);
  alloc.deallocate(neighbour);
  EXPECT_EQ(alloc.memory_reserved(), 52 * MiB);
  alloc.empty_cache();
  EXPECT_EQ(alloc.memory_reserved(), 20 * MiB);  // one live block keeps its segment
  EXPECT_EQ(alloc.memory_allocated(), 5 * MiB);
  EXPECT_EQ(dev.frees, 2);
  EXPECT_THAT(dev.freed_sizes, ::testing::UnorderedElementsAre(2 * MiB, 30 * MiB));
  EXPECT_GE(dev.syncs, 1);
  const MemoryStats& s = alloc.stats();
  EXPECT_EQ(s.segment[0].current, 1);
  EXPECT_EQ(s.segment[1].current, 0);
  EXPECT_EQ(s.num_device_free, 2);
  alloc.deallocate(kept);
  alloc.empty_cache();
  EXPECT_EQ(alloc.memory_reserved(), 0u);
  EXPECT_EQ(dev.used(), 0u);
}

TEST(CachingAllocator, StreamsNeverShareBlocks) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 0);
  void* a = alloc.allocate(4096, /*stream=*/0);
  alloc.deallocate(a);
  void* b = alloc.allocate(4096, /*stream=*/1);  // the cached block belongs to stream 0
  EXPECT_EQ(dev.mallocs, 2);
  EXPECT_NE(b, a);
  void* c = alloc.allocate(4096, /*stream=*/0);  // stream 0 reuses its own
  EXPECT_EQ(c, a);
  EXPECT_EQ(dev.mallocs, 2);
  // Large pool too.
  void* d = alloc.allocate(5 * MiB, 7);
  alloc.deallocate(d);
  void* e = alloc.allocate(5 * MiB, 8);
  EXPECT_NE(e, d);
  EXPECT_EQ(dev.mallocs, 4);
  for (void* p : {b, c, e}) alloc.deallocate(p);
}

// ---- statistics -------------------------------------------------------------------------------

TEST(CachingAllocatorStats, PeaksAndResetPeak) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 0);
  void* a = alloc.allocate(30 * MiB);
  void* b = alloc.allocate(1000);
  alloc.deallocate(a);
  EXPECT_EQ(alloc.memory_allocated(), 1024u);
  EXPECT_EQ(alloc.max_memory_allocated(), 30 * MiB + 1024);
  EXPECT_EQ(alloc.max_memory_reserved(), 32 * MiB);
  alloc.empty_cache();
  EXPECT_EQ(alloc.memory_reserved(), 2 * MiB);
  EXPECT_EQ(alloc.max_memory_reserved(), 32 * MiB);
  alloc.reset_peak_memory_stats();
  EXPECT_EQ(alloc.max_memory_allocated(), 1024u);
  EXPECT_EQ(alloc.max_memory_reserved(), 2 * MiB);
  const MemoryStats& s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes[2].peak, 0);
  EXPECT_EQ(s.requested_bytes[0].peak, 1000);
  alloc.deallocate(b);
}

TEST(CachingAllocatorStats, AllocatedFreedTotalsAndReset) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 0);
  for (int i = 0; i < 3; ++i) alloc.deallocate(alloc.allocate(5 * MiB));
  const MemoryStats& s = alloc.stats();
  EXPECT_EQ(s.allocation[0].allocated, 3);
  EXPECT_EQ(s.allocation[0].freed, 3);
  EXPECT_EQ(s.allocation[0].current, 0);
  EXPECT_EQ(s.allocation[2].allocated, 3);
  EXPECT_EQ(s.allocation[1].allocated, 0);
  EXPECT_EQ(s.allocated_bytes[0].allocated, static_cast<int64_t>(15 * MiB));
  EXPECT_EQ(s.allocated_bytes[0].freed, static_cast<int64_t>(15 * MiB));
  EXPECT_EQ(s.active_bytes[0].allocated, static_cast<int64_t>(15 * MiB));
  EXPECT_EQ(s.segment[0].allocated, 1);
  EXPECT_EQ(s.reserved_bytes[0].current, static_cast<int64_t>(20 * MiB));
  EXPECT_EQ(s.num_device_alloc, 1);
  alloc.reset_accumulated_memory_stats();
  EXPECT_EQ(s.allocation[0].allocated, 0);
  EXPECT_EQ(s.allocation[0].freed, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(s.reserved_bytes[0].current, static_cast<int64_t>(20 * MiB));  // current stays
  MemoryStats copy = alloc.stats_snapshot();
  EXPECT_EQ(copy.reserved_bytes[0].current, s.reserved_bytes[0].current);
}

// ---- out of memory ---------------------------------------------------------------------------

TEST(CachingAllocatorOom, ExactPyTorchMessage) {
  FakeDevice dev(100 * MiB, /*overhead=*/10 * MiB);
  CachingAllocator alloc(dev, 3);
  void* a = alloc.allocate(50 * MiB);
  void* b = alloc.allocate(5 * MiB);  // its 20 MiB segment has 15 MiB cached but in use
  try {
    alloc.allocate(40 * MiB);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(std::string(e.what()),
              "CUDA out of memory. Tried to allocate 40.00 MiB. GPU 3 has a total capacity of "
              "100.00 MiB of which 20.00 MiB is free. Including non-PyTorch memory, this process "
              "has 80.00 MiB memory in use. Of the allocated memory 55.00 MiB is allocated by "
              "PyTorch, and 15.00 MiB is reserved by PyTorch but unallocated. If reserved but "
              "unallocated memory is large try setting "
              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
              "documentation for Memory Management  "
              "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)");
    EXPECT_EQ(e.device(), 3);
  }
  EXPECT_EQ(alloc.stats().num_ooms, 1);
  EXPECT_EQ(alloc.stats().num_alloc_retries, 1);
  alloc.deallocate(a);
  alloc.deallocate(b);
}

TEST(CachingAllocatorOom, TriedToAllocateIsTheSegmentSizeAndTheErrorIsAnError) {
  FakeDevice dev(10 * MiB);
  CachingAllocator alloc(dev, 0);
  EXPECT_THROW(alloc.allocate(9 * MiB), Error);  // 9 MiB needs a 20 MiB segment
  try {
    alloc.allocate(3 * MiB);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
                                    "10.00 MiB of which 10.00 MiB is free."));
  }
  EXPECT_EQ(alloc.stats().num_ooms, 2);
}

TEST(CachingAllocatorOom, RetryAfterReleasingCachedSegmentsSucceeds) {
  FakeDevice dev(60 * MiB);
  CachingAllocator alloc(dev, 0);
  void* small = alloc.allocate(100);     // 2 MiB segment, live: must survive the flush
  void* a = alloc.allocate(30 * MiB);
  alloc.deallocate(a);                   // cached, wholly free
  void* b = alloc.allocate(40 * MiB);    // 2 + 30 + 40 > 60: flush the 30 MiB, retry
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(alloc.stats().num_alloc_retries, 1);
  EXPECT_EQ(alloc.stats().num_ooms, 0);
  EXPECT_EQ(alloc.memory_reserved(), 42 * MiB);
  EXPECT_EQ(dev.freed_sizes, std::vector<size_t>{30 * MiB});
  EXPECT_GE(dev.syncs, 1);
  alloc.deallocate(b);
  alloc.deallocate(small);
}

TEST(CachingAllocatorOom, RetrySequenceOnTheRawAllocator) {
  StrictMock<MockRawAllocator> raw;
  void* seg30 = fake_ptr(0x100000000);
  void* seg40 = fake_ptr(0x200000000);
  {
    InSequence in_order;
    EXPECT_CALL(raw, raw_malloc(30 * MiB)).WillOnce(Return(seg30));
    EXPECT_CALL(raw, raw_malloc(40 * MiB)).WillOnce(Return(nullptr));
    EXPECT_CALL(raw, raw_free(seg30, 30 * MiB));
    EXPECT_CALL(raw, raw_malloc(40 * MiB)).WillOnce(Return(seg40));
    EXPECT_CALL(raw, raw_free(seg40, 40 * MiB));  // the destructor
  }
  CachingAllocator alloc(raw, 0);
  alloc.deallocate(alloc.allocate(30 * MiB));
  void* p = alloc.allocate(40 * MiB);
  EXPECT_EQ(p, seg40);
  EXPECT_EQ(alloc.stats().num_alloc_retries, 1);
  alloc.deallocate(p);
}

TEST(CachingAllocatorOom, AllocatorStaysUsableAfterOom) {
  FakeDevice dev(64 * MiB);
  CachingAllocator alloc(dev, 0);
  void* a = alloc.allocate(40 * MiB);
  void* b = alloc.allocate(1000);
  const MemoryStats before = alloc.stats_snapshot();
  EXPECT_THROW(alloc.allocate(30 * MiB), OutOfMemoryError);
  const MemoryStats& s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes[0].current, before.allocated_bytes[0].current);
  EXPECT_EQ(s.reserved_bytes[0].current, before.reserved_bytes[0].current);
  EXPECT_EQ(s.allocation[0].current, 2);
  EXPECT_EQ(s.num_ooms, 1);
  // Small requests still come from the cache; after freeing, the big one fits.
  void* c = alloc.allocate(2000);
  EXPECT_EQ(dev.mallocs, 2);
  alloc.deallocate(a);
  void* d = alloc.allocate(30 * MiB);  // reuses the cached 40 MiB block, split
  EXPECT_EQ(d, a);
  EXPECT_EQ(dev.mallocs, 2);
  for (void* p : {b, c, d}) alloc.deallocate(p);
  alloc.empty_cache();
  EXPECT_EQ(dev.used(), 0u);
}

// PyTorch's allocate(): 1 EiB (2^60 bytes) or more is refused before the allocator runs, in one
// sentence without the device's figures, and is not counted as an OOM of the allocator; sizes
// near 2^64 never reach the rounding. Just below 1 EiB is the allocator's ordinary OOM.
TEST(CachingAllocatorOom, OneExabyteOrMoreIsRefusedBeforeAnythingElse) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 0);
  for (size_t bytes : {SIZE_MAX, SIZE_MAX - 100, SIZE_MAX - 511, size_t(1) << 60}) {
    try {
      alloc.allocate(bytes);
      ADD_FAILURE() << bytes;
    } catch (const OutOfMemoryError& e) {
      EXPECT_STREQ(e.what(), "CUDA out of memory. Tried to allocate more than 1EB memory.") << bytes;
    }
  }
  EXPECT_EQ(alloc.stats().num_ooms, 0);
  try {
    alloc.allocate((size_t(1) << 60) - 1);
    ADD_FAILURE();
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Tried to allocate 1073741824.00 GiB. GPU 0 has a total capacity"));
  }
  EXPECT_EQ(alloc.stats().num_ooms, 1);
  EXPECT_EQ(alloc.memory_reserved(), 0u);
}

// ---- misuse ------------------------------------------------------------------------------

TEST(CachingAllocator, ForeignAndDoubleFreesThrowNullAndZeroAreNoOps) {
  FakeDevice dev(1 * GiB);
  CachingAllocator alloc(dev, 2);
  EXPECT_EQ(alloc.allocate(0), nullptr);
  EXPECT_NO_THROW(alloc.deallocate(nullptr));
  int on_the_stack = 0;
  EXPECT_THROW(alloc.deallocate(&on_the_stack), Error);
  void* p = alloc.allocate(4096);
  void* inside = static_cast<char*>(p) + 512;  // not the start of a block
  EXPECT_THROW(alloc.deallocate(inside), Error);
  alloc.deallocate(p);
  try {
    alloc.deallocate(p);
    FAIL() << "double free accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("was not allocated by the caching allocator of GPU 2"));
    EXPECT_EQ(e.device(), 2);
  }
  EXPECT_EQ(alloc.memory_allocated(), 0u);
  EXPECT_EQ(alloc.stats().allocation[0].allocated, 1);
}

TEST(CachingAllocator, DestructorReturnsEverySegment) {
  FakeDevice dev(1 * GiB);
  {
    CachingAllocator alloc(dev, 0);
    alloc.allocate(100);
    alloc.allocate(100);
    void* a = alloc.allocate(5 * MiB);
    alloc.allocate(7 * MiB);
    alloc.deallocate(a);
    alloc.allocate(30 * MiB);
    EXPECT_EQ(dev.segments(), 3u);
  }
  EXPECT_EQ(dev.segments(), 0u);
  EXPECT_EQ(dev.used(), 0u);
}

// ---- tracing -----------------------------------------------------------------------------

TEST(CachingAllocatorTrace, EmitsAllocFreeAndSegmentEvents) {
  FakeDevice dev(100 * MiB);
  TraceBus bus;
  bus.set_clock([](int device) { return 1.5 + device; });
  std::vector<TraceEvent> events;
  bus.subscribe([&](const TraceEvent& e) { events.push_back(e); });
  CachingAllocator alloc(dev, 1, &bus);
  void* p = alloc.allocate(1000, 2);
  alloc.deallocate(p);
  alloc.empty_cache();
  EXPECT_THROW(alloc.allocate(200 * MiB), OutOfMemoryError);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].kind, EventKind::segment_alloc);
  EXPECT_EQ(events[0].bytes, 2 * MiB);
  EXPECT_EQ(events[0].reserved, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(events[1].kind, EventKind::alloc);
  EXPECT_EQ(events[1].bytes, 1024u);
  EXPECT_EQ(events[1].allocated, 1024);
  EXPECT_EQ(events[1].reserved, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(events[1].device, 1);
  EXPECT_EQ(events[1].stream, 2);
  EXPECT_DOUBLE_EQ(events[1].start_s, 2.5);
  EXPECT_EQ(events[2].kind, EventKind::free);
  EXPECT_EQ(events[2].bytes, 1024u);
  EXPECT_EQ(events[2].allocated, 0);
  EXPECT_EQ(events[3].kind, EventKind::segment_free);
  EXPECT_EQ(events[3].reserved, 0);
  EXPECT_EQ(events[4].kind, EventKind::oom);
  EXPECT_EQ(events[4].bytes, 200 * MiB);
}

TEST(CachingAllocatorTrace, NoSubscriberNoEvents) {
  FakeDevice dev(100 * MiB);
  TraceBus bus;
  CachingAllocator alloc(dev, 0, &bus);
  alloc.deallocate(alloc.allocate(1000));
  EXPECT_FALSE(bus.active());
}

// ---- invariants under random traffic ------------------------------------------------------

TEST(CachingAllocatorProperty, RandomTrafficKeepsTheBooksAndMergesBackToNothing) {
  FakeDevice dev(512 * MiB);
  CachingAllocator alloc(dev, 0);
  std::mt19937_64 rng(1234);
  struct Live {
    void* p;
    size_t requested;
  };
  std::vector<Live> live;
  std::map<uintptr_t, size_t> spans;  // address -> rounded size, to check for overlaps
  size_t requested_total = 0;
  auto check_books = [&] {
    const MemoryStats& s = alloc.stats();
    ASSERT_EQ(s.requested_bytes[0].current, static_cast<int64_t>(requested_total));
    ASSERT_EQ(s.reserved_bytes[0].current, static_cast<int64_t>(dev.used()));
    ASSERT_EQ(s.allocation[0].current, static_cast<int64_t>(live.size()));
    ASSERT_EQ(s.allocated_bytes[0].current,
              s.allocated_bytes[1].current + s.allocated_bytes[2].current);
    ASSERT_LE(s.allocated_bytes[0].current + s.inactive_split_bytes[0].current,
              s.reserved_bytes[0].current);
  };
  for (int step = 0; step < 4000; ++step) {
    const bool do_alloc = live.empty() || rng() % 100 < 55;
    if (do_alloc) {
      size_t bytes;
      switch (rng() % 4) {
        case 0: bytes = 1 + rng() % 4096; break;
        case 1: bytes = 1 + rng() % (1 * MiB); break;
        case 2: bytes = 1 * MiB + rng() % (9 * MiB); break;
        default: bytes = 10 * MiB + rng() % (20 * MiB); break;
      }
      void* p = nullptr;
      try {
        p = alloc.allocate(bytes, static_cast<int>(rng() % 2));
      } catch (const OutOfMemoryError&) {
        continue;
      }
      const uintptr_t a = addr_of(p);
      auto next = spans.lower_bound(a);
      if (next != spans.end()) {
        ASSERT_GE(next->first, a + allocator_round_size(bytes));
      }
      if (next != spans.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, a);
      }
      spans[a] = allocator_round_size(bytes);
      live.push_back({p, bytes});
      requested_total += bytes;
    } else {
      const size_t i = rng() % live.size();
      alloc.deallocate(live[i].p);
      spans.erase(addr_of(live[i].p));
      requested_total -= live[i].requested;
      live[i] = live.back();
      live.pop_back();
    }
    check_books();
  }
  for (const Live& l : live) alloc.deallocate(l.p);
  live.clear();
  requested_total = 0;
  check_books();
  const MemoryStats& s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes[0].current, 0);
  EXPECT_EQ(s.inactive_split[0].current, 0);  // every segment merged back whole
  EXPECT_EQ(s.inactive_split_bytes[0].current, 0);
  alloc.empty_cache();
  EXPECT_EQ(dev.used(), 0u);
  EXPECT_EQ(s.segment[0].current, 0);
}

// Several threads on one device (DataParallel workers later); the allocator serialises them.
TEST(CachingAllocatorThreads, ConcurrentAllocFreeOnOneDevice) {
  FakeDevice dev(4 * GiB);
  CachingAllocator alloc(dev, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&alloc, t] {
      std::mt19937 rng(t);
      std::vector<void*> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.size() < 8 && rng() % 3 != 0) {
          mine.push_back(alloc.allocate(1 + rng() % (3 * MiB), t % 2));
        } else if (!mine.empty()) {
          alloc.deallocate(mine.back());
          mine.pop_back();
        }
        (void)alloc.memory_allocated();
      }
      for (void* p : mine) alloc.deallocate(p);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(alloc.memory_allocated(), 0u);
  EXPECT_EQ(alloc.stats().allocation[0].current, 0);
  alloc.empty_cache();
  EXPECT_EQ(dev.used(), 0u);
}

}  // namespace
}  // namespace furnace
