// furnace/bulk_allocator.h: an allocator for large host arrays that are written in full right
// after they are made (the dataset's pixels): elements are default-initialised, so resize() does
// not zero memory that the next loop overwrites, and an allocation of 2 MiB or more is aligned to
// 2 MiB and madvise(MADV_HUGEPAGE)d, so the kernel maps it with huge pages where transparent huge
// pages are enabled for madvise (Debian's default). Measured on the 2-core build machine (a VM,
// where every page fault is a trip through the hypervisor): the 188 MB of Fashion-MNIST's
// training pixels as floats took over a second of `furnace train`'s start in zeroing and 4 KiB
// page faults. The dataset now holds the file's 47 MB of bytes (furnace/data.h), still from here.
#pragma once

#include <cstddef>
#include <new>
#include <utility>

namespace furnace {

// Raw bytes for BulkAllocator: aligned as above; throws std::bad_alloc when none are left.
void* bulk_allocate(std::size_t bytes);
void bulk_deallocate(void* p, std::size_t bytes) noexcept;

template <class T>
struct BulkAllocator {
  using value_type = T;

  BulkAllocator() = default;
  template <class U>
  BulkAllocator(const BulkAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(bulk_allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { bulk_deallocate(p, n * sizeof(T)); }

  // Default-initialisation: no value for resize(n) to write (an arithmetic T stays unset).
  template <class U>
  void construct(U* p) noexcept(noexcept(::new (static_cast<void*>(p)) U)) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }

  template <class U>
  bool operator==(const BulkAllocator<U>&) const noexcept { return true; }
};

}  // namespace furnace
