// The host pages behind simulated device memory (backend/sim/host_pages.h).
#include "backend/sim/host_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "furnace/address_limits.h"
#include "furnace/backend.h"  // defines: kBlasAddressReserve
#include "furnace/error.h"
#include "furnace/size_format.h"  // defines: format_size

namespace furnace {

namespace {

// Why mapping `bytes` more would leave the BLAS library too little address space, or "".
std::string blas_room_problem(size_t bytes) {
  for (const AddressSpaceLimit& l : address_space_limits()) {
    if (l.used + bytes + kBlasAddressReserve <= l.limit) continue;
    return std::string("it would leave less than the ") + format_size(kBlasAddressReserve) +
           " the BLAS library may still need under " + l.name + " " + format_size(l.limit) + " (" +
           format_size(l.used) + " mapped already)";
  }
  return "";
}

}  // namespace

void* map_host_pages(size_t bytes, const std::string& gpu_name) {
  const std::string tight = blas_room_problem(bytes);
  FURNACE_CHECK(tight.empty()) << "out of host memory: the simulator cannot map " << format_size(bytes)
                               << " of host RAM for an allocation on the simulated " << gpu_name << ": " << tight;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  FURNACE_CHECK(p != MAP_FAILED)
      << "out of host memory: the simulator could not map " << format_size(bytes) << " of host RAM for an "
      << "allocation on the simulated " << gpu_name << " (mmap: " << std::strerror(errno)
      << "); the simulated GPU had room, but its tensors live in this process's memory, which "
         "ulimit -v, the container's limit or the machine's RAM caps";
  return p;
}

void unmap_host_pages(void* p, size_t bytes) { ::munmap(p, bytes); }

}  // namespace furnace
