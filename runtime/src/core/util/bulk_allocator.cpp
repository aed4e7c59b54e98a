// core/util/bulk_allocator: the raw memory behind BulkAllocator (furnace/bulk_allocator.h).
#include "furnace/bulk_allocator.h"

#include <sys/mman.h>  // defines: madvise, MADV_HUGEPAGE

#include <cstdlib>  // defines: std::aligned_alloc, std::free

namespace furnace {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;

}  // namespace

void* bulk_allocate(std::size_t bytes) {
  if (bytes < kHugePage) {
    if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
    throw std::bad_alloc();
  }
  // aligned_alloc wants a multiple of the alignment; the tail of the last huge page is unused.
  const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  if (rounded < bytes) throw std::bad_alloc();
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
  // Advice only: where transparent huge pages are off (or the call fails) the pages are 4 KiB.
  (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

void bulk_deallocate(void* p, std::size_t) noexcept { std::free(p); }

}  // namespace furnace
