// core/util/address_limits: ulimit -v / -d and what this process has mapped (see the header).
#include "furnace/address_limits.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

namespace furnace {

std::vector<AddressSpaceLimit> address_space_limits() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0, shared = 0, text = 0, lib = 0, data = 0;
  if (!(f >> size >> resident >> shared >> text >> lib >> data)) size = data = 0;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const struct { int resource; const char* name; uint64_t used; } all[] = {
      {RLIMIT_AS, "RLIMIT_AS (ulimit -v)", size * page}, {RLIMIT_DATA, "RLIMIT_DATA (ulimit -d)", data * page}};
  std::vector<AddressSpaceLimit> out;
  for (const auto& l : all) {
    struct rlimit rl {};
    if (::getrlimit(l.resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) continue;
    out.push_back(AddressSpaceLimit{l.name, static_cast<uint64_t>(rl.rlim_cur), l.used});
  }
  return out;
}

}  // namespace furnace
