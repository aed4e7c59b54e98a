// furnace/address_limits.h: the process's finite address-space limits (ulimit -v: RLIMIT_AS,
// ulimit -d: RLIMIT_DATA), each with what the process has mapped against it (/proc/self/statm;
// 0 where it cannot be read). The host-memory guard, the simulator's page mapping and the CLI's
// exit read them here.
#pragma once

#include <cstdint>
#include <vector>

namespace furnace {

struct AddressSpaceLimit {
  const char* name;  // "RLIMIT_AS (ulimit -v)", "RLIMIT_DATA (ulimit -d)"
  uint64_t limit;    // bytes
  uint64_t used;     // bytes mapped now: the whole address space, or the data segment
};

// Only the limits that are set; empty when neither is.
std::vector<AddressSpaceLimit> address_space_limits();

}  // namespace furnace
