// How much host memory this process may still use: the smallest of what the machine has
// (MemAvailable), what its container allows (the cgroup's limit minus its usage) and what its
// ulimits allow (RLIMIT_AS, RLIMIT_DATA, minus what the process has mapped already). Each source
// that cannot be read is left out; when none can, the budget is unknown and says why.
// FURNACE_CGROUP_DIR names a folder to read the cgroup files from instead of the process's own
// cgroup (tests fake a container's limit with it); FURNACE_MEMINFO a file to read for /proc/meminfo.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "furnace/allocator.h"  // defines: format_size
#include "furnace/backend.h"    // defines: kBlasAddressReserve
#include "furnace/address_limits.h"
#include "furnace/error.h"
#include "furnace/host_memory.h"

namespace furnace {
namespace {

namespace fs = std::filesystem;

// A cgroup's "no limit": v2 writes "max", v1 a page-rounded 2^63 - 1.
constexpr uint64_t kNoLimit = uint64_t{1} << 62;
// Each extra thread reserves address space: its stack (8 MiB, glibc's usual default) and, on
// first malloc, a glibc arena (64 MiB; at most 8 per core). The simulator keeps
// kBlasAddressReserve free for the BLAS library's buffers.
constexpr uint64_t kStack = 8ull << 20, kArena = 64ull << 20;

const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// The first number in `path` ("max" -> kNoLimit); false when it cannot be read.
bool read_number(const fs::path& path, uint64_t* out) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word)) return false;
  if (word == "max") {
    *out = kNoLimit;
    return true;
  }
  char* end = nullptr;
  *out = std::strtoull(word.c_str(), &end, 10);
  return end && *end == '\0' && end != word.c_str();
}

uint64_t meminfo_available(bool* known) {
  std::ifstream f(env_or("FURNACE_MEMINFO", "/proc/meminfo"));
  std::string line;
  while (std::getline(f, line)) {  // "MemAvailable:   23382924 kB"
    std::istringstream in(line);
    std::string key;
    uint64_t kib = 0;
    if (in >> key >> kib && key == "MemAvailable:") {
      *known = true;
      return kib * 1024;
    }
  }
  return 0;
}

// One cgroup folder's room (limit - usage), v2 or v1 files; false when it has no limit or none
// can be read.
bool cgroup_room(const fs::path& dir, uint64_t* room, std::string* what) {
  uint64_t limit = 0, usage = 0;
  const char* names[2][2] = {{"memory.max", "memory.current"}, {"memory.limit_in_bytes", "memory.usage_in_bytes"}};
  for (const auto& n : names) {
    if (!read_number(dir / n[0], &limit) || limit >= kNoLimit) continue;
    if (!read_number(dir / n[1], &usage)) usage = 0;
    *room = limit > usage ? limit - usage : 0;
    *what = "the cgroup's " + std::string(n[0]) + " " + format_size(limit) + " minus its usage " +
            format_size(usage) + ", in " + dir.string();
    return true;
  }
  return false;
}

// The folders of this process's memory cgroup and its ancestors, nearest first (a limit set on a
// parent binds the child too). A container sees its own cgroup at the mount's root.
std::vector<fs::path> cgroup_dirs() {
  if (const char* fake = std::getenv("FURNACE_CGROUP_DIR")) {
    std::error_code ec;
    FURNACE_CHECK(fs::is_directory(fake, ec))
        << "FURNACE_CGROUP_DIR='" << printable_clipped(fake) << "' is not a folder (it names the folder that "
        << "holds a cgroup's memory.max and memory.current, or memory.limit_in_bytes and memory.usage_in_bytes)";
    return {fs::path(fake)};
  }
  std::vector<fs::path> dirs;
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {  // "0::/user.slice/..." (v2) or "4:memory:/docker/..." (v1)
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    fs::path root;
    if (controllers.empty()) root = "/sys/fs/cgroup";
    else if (controllers == "memory" || controllers.find("memory,") == 0 || controllers.find(",memory") != std::string::npos)
      root = "/sys/fs/cgroup/memory";
    else continue;
    for (fs::path p = fs::path(line.substr(b + 1)).relative_path(); ; p = p.parent_path()) {
      dirs.push_back(root / p);
      if (p.empty()) break;
    }
  }
  return dirs;
}

}  // namespace

uint64_t host_memory_available() {
  bool known = false;
  return meminfo_available(&known);
}

HostMemoryBudget host_memory_budget(int extra_threads) {
  HostMemoryBudget b;
  auto consider = [&b](uint64_t room, const std::string& source) {
    if (!b.known || room < b.bytes) {
      b.bytes = room;
      b.source = source;
    }
    b.known = true;
  };
  bool meminfo = false;
  const uint64_t avail = meminfo_available(&meminfo);
  if (meminfo) consider(avail, "MemAvailable in /proc/meminfo");
  for (const fs::path& dir : cgroup_dirs()) {
    uint64_t room = 0;
    std::string what;
    if (cgroup_room(dir, &room, &what)) consider(room, what);
  }
  // The ulimits count address space, not resident pages: what the run adds must fit beside what
  // is mapped already, and the threads it starts reserve their stacks and heaps up front.
  const uint64_t resident = host_memory_resident();
  const uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t extra = static_cast<uint64_t>(std::max(0, extra_threads));
  const uint64_t threads = extra * kStack + std::min(extra, 8 * cores) * kArena + kBlasAddressReserve;
  for (const AddressSpaceLimit& l : address_space_limits()) {
    const uint64_t limit = l.limit;
    // The estimate counts the resident part of the process itself: leave that in the room.
    const uint64_t taken = (l.used > resident ? l.used - resident : 0) + threads;
    consider(limit > taken ? limit - taken : 0,
             "the limit " + std::string(l.name) + " " + format_size(limit) + " minus this process's mappings " +
                 format_size(l.used) + " and what its threads and the BLAS library keep free " + format_size(threads));
  }
  if (!b.known)
    b.source = std::string("unknown: ") + env_or("FURNACE_MEMINFO", "/proc/meminfo") +
               " has no MemAvailable, no cgroup memory limit can be read and no ulimit is set";
  return b;
}

}  // namespace furnace
