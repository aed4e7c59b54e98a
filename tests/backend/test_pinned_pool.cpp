// PinnedPool, the page-locked staging blocks of the cuda backend's asynchronous host-to-device
// copies: sizes, reuse only after the copy that read a block has finished, the retry when the host
// refuses more page-locked memory, and the teardown that never frees a block a copy still reads.
// A fake host stands in for cudaHostAlloc and CUDA events.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <vector>

#include "backend/pinned_pool.h"

namespace furnace {
namespace {

// Events are integers; a test completes them by hand.
struct FakeHost : PinnedPool::Host {
  void* alloc_pinned(size_t bytes) override {
    if (reserved + bytes > limit) return nullptr;
    reserved += bytes;
    ++allocs;
    void* p = std::malloc(bytes);
    sizes[p] = bytes;
    return p;
  }
  void free_pinned(void* ptr) override {
    ASSERT_TRUE(sizes.count(ptr));
    for (auto& [event, block] : reading) ASSERT_NE(block, ptr) << "freed while a copy reads it";
    reserved -= sizes[ptr];
    sizes.erase(ptr);
    ++frees;
    std::free(ptr);
  }
  bool event_done(void* e) override { return done.count(id(e)) > 0; }
  void wait_event(void* e) override { complete(id(e)); }
  void release_event(void* e) override { released.insert(id(e)); }

  // A copy reading `block` starts: its event.
  void* start_copy(void* block) {
    const intptr_t e = ++next_event;
    reading[e] = block;
    return reinterpret_cast<void*>(e);
  }
  void complete(intptr_t e) {
    done.insert(e);
    reading.erase(e);
  }
  static intptr_t id(void* e) { return reinterpret_cast<intptr_t>(e); }

  size_t limit = size_t(1) << 30, reserved = 0;
  int allocs = 0, frees = 0;
  intptr_t next_event = 0;
  std::map<void*, size_t> sizes;
  std::map<intptr_t, void*> reading;
  std::set<intptr_t> done, released;
};

TEST(PinnedPool, RoundsToPowersOfTwoOfAtLeastFourKiB) {
  EXPECT_EQ(PinnedPool::round_size(0), 4096u);
  EXPECT_EQ(PinnedPool::round_size(1), 4096u);
  EXPECT_EQ(PinnedPool::round_size(4096), 4096u);
  EXPECT_EQ(PinnedPool::round_size(4097), 8192u);
  EXPECT_EQ(PinnedPool::round_size(802816), 1048576u);  // a batch of 256 x 784 floats
}

TEST(PinnedPool, ABlockIsReusedOnlyOnceItsCopyHasFinished) {
  FakeHost host;
  PinnedPool pool(host);
  void* a = pool.acquire(100000);
  void* ea = host.start_copy(a);
  pool.release(a, ea);
  void* b = pool.acquire(100000);  // a's copy is still running: a new block
  EXPECT_NE(b, a);
  EXPECT_EQ(host.allocs, 2);
  host.complete(FakeHost::id(ea));
  void* c = pool.acquire(90000);  // same size class, copy done: a again
  EXPECT_EQ(c, a);
  EXPECT_EQ(host.allocs, 2);
  EXPECT_TRUE(host.released.count(FakeHost::id(ea)));  // the event went back once it was used
  const PinnedPool::Stats s = pool.stats();
  EXPECT_EQ(s.blocks, 2u);
  EXPECT_EQ(s.in_use, 2u);
  EXPECT_EQ(s.reuses, 1);
  EXPECT_EQ(s.reserved_bytes, 2u * 131072u);
  pool.release(b, nullptr);
  pool.release(c, nullptr);
}

TEST(PinnedPool, ASmallRequestDoesNotTakeABigBlock) {
  FakeHost host;
  PinnedPool pool(host);
  void* big = pool.acquire(1 << 20);
  pool.release(big, nullptr);
  void* small = pool.acquire(4096);  // 1 MiB is more than twice 4 KiB: a block of its own
  EXPECT_NE(small, big);
  void* half = pool.acquire(600000);  // rounds to 1 MiB: the big block fits
  EXPECT_EQ(half, big);
  pool.release(small, nullptr);
  pool.release(half, nullptr);
}

TEST(PinnedPool, WhenTheHostRefusesItWaitsFreesIdleBlocksAndRetries) {
  FakeHost host;
  host.limit = 3 * 65536;
  PinnedPool pool(host);
  void* a = pool.acquire(65536);
  void* b = pool.acquire(65536);
  void* ea = host.start_copy(a);
  pool.release(a, ea);                 // pending
  pool.release(b, nullptr);            // idle
  void* c = pool.acquire(131072);      // 64 KiB free on the host: not enough for 128 KiB
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(host.done.count(FakeHost::id(ea)));  // it waited for a's copy before freeing a
  EXPECT_EQ(host.frees, 2);
  EXPECT_EQ(pool.stats().blocks, 1u);
  host.limit = 131072;
  EXPECT_EQ(pool.acquire(65536), nullptr);  // nothing idle to free: the caller copies pageable
  pool.release(c, nullptr);
}

TEST(PinnedPool, TeardownWaitsForPendingCopiesBeforeFreeing) {
  FakeHost host;
  {
    PinnedPool pool(host);
    void* a = pool.acquire(5000);
    pool.release(a, host.start_copy(a));
    void* b = pool.acquire(5000);
    (void)b;  // still acquired at teardown: freed too
  }  // FakeHost::free_pinned fails the test if a copy still read a block
  EXPECT_EQ(host.frees, 2);
  EXPECT_EQ(host.reserved, 0u);
}

TEST(PinnedPool, ReleasingAForeignBlockIsAnError) {
  FakeHost host;
  PinnedPool pool(host);
  int x = 0;
  EXPECT_THROW(pool.release(&x, nullptr), Error);
}

}  // namespace
}  // namespace furnace
