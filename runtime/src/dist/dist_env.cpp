// dist/dist_env: see furnace/dist_env.h.
#include "furnace/dist_env.h"

#include <cstdlib>
#include <sstream>

#include "furnace/error.h"

namespace furnace {
namespace {

const char* const kVariables[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_NUM_NODES"};

const std::string* find(const Environment& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? nullptr : &it->second;
}

// A decimal integer in [lo, hi]; nothing else (no sign, no spaces, no suffix).
int parse_int(const std::string& value, const char* key, long lo, long hi) {
  bool digits = !value.empty() && value.size() <= 9;
  for (char c : value) digits = digits && c >= '0' && c <= '9';
  FURNACE_CHECK(digits) << key << "='" << value << "' is not a number (the launcher's variables are decimal integers)";
  const long v = std::strtol(value.c_str(), nullptr, 10);
  FURNACE_CHECK(v >= lo && v <= hi) << key << "=" << v << " is out of range (" << lo << " .. " << hi << ")";
  return static_cast<int>(v);
}

int required(const Environment& env, const char* key, long lo, long hi, const char* why) {
  const std::string* v = find(env, key);
  FURNACE_CHECK(v != nullptr) << key << " is not set, but " << why;
  return parse_int(*v, key, lo, hi);
}

int optional_int(const Environment& env, const char* key, long lo, long hi, int fallback) {
  const std::string* v = find(env, key);
  return v ? parse_int(*v, key, lo, hi) : fallback;
}

// Slurm's SLURM_STEP_TASKS_PER_NODE: "4", "4(x2)" or "4(x2),3": the first node's count.
int slurm_first_count(const std::string& value) {
  std::string head = value.substr(0, value.find_first_of("(,"));
  return parse_int(head, "SLURM_STEP_TASKS_PER_NODE", 1, 1 << 20);
}

void check_and_fill_master(const Environment& env, DistEnv& d) {
  const std::string* addr = find(env, "MASTER_ADDR");
  const std::string* port = find(env, "MASTER_PORT");
  if (addr) {
    FURNACE_CHECK(!addr->empty()) << "MASTER_ADDR is set but empty: it names rank 0's host";
    d.master_addr = *addr;
  } else {
    FURNACE_CHECK(d.local_world == d.world)
        << "MASTER_ADDR is not set: a job over several nodes (" << d.world << " ranks, " << d.local_world
        << " on this node, from " << d.launcher << ") needs MASTER_ADDR and MASTER_PORT naming rank 0's host; "
        << "export them on every node";
  }
  if (port) d.master_port = parse_int(*port, "MASTER_PORT", 1, 65535);
}

}  // namespace

std::string DistEnv::describe() const {
  std::ostringstream s;
  s << "rank " << rank << " of " << world << " (local rank " << local_rank << " of " << local_world << " on node "
    << group_rank << "), store at " << master_addr << ":" << master_port << ", from " << launcher;
  return s.str();
}

std::optional<DistEnv> read_dist_env(const Environment& env) {
  DistEnv d;
  constexpr long kMaxRanks = 1 << 20;
  if (find(env, "WORLD_SIZE") || find(env, "RANK")) {
    d.launcher = "torchrun or furnace launch";
    d.world = required(env, "WORLD_SIZE", 1, kMaxRanks, "RANK is (torch.distributed's env:// needs both)");
    d.rank = required(env, "RANK", 0, kMaxRanks, "WORLD_SIZE is (torch.distributed's env:// needs both)");
    // Without the per-node variables every rank is on this node, as a hand-written env:// job is.
    d.local_world = optional_int(env, "LOCAL_WORLD_SIZE", 1, kMaxRanks, d.world);
    d.local_rank = optional_int(env, "LOCAL_RANK", 0, kMaxRanks, d.rank % d.local_world);
    d.group_rank = optional_int(env, "GROUP_RANK", 0, kMaxRanks, d.rank / d.local_world);
  } else if (find(env, "OMPI_COMM_WORLD_SIZE")) {
    d.launcher = "Open MPI";
    d.world = required(env, "OMPI_COMM_WORLD_SIZE", 1, kMaxRanks, "");
    d.rank = required(env, "OMPI_COMM_WORLD_RANK", 0, kMaxRanks, "OMPI_COMM_WORLD_SIZE is");
    d.local_world = optional_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, kMaxRanks, d.world);
    d.local_rank = optional_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, kMaxRanks, d.rank % d.local_world);
    d.group_rank = d.rank / d.local_world;  // mpirun fills nodes in order (--map-by slot)
  } else if (find(env, "SLURM_STEP_NUM_TASKS")) {
    d.launcher = "Slurm";
    d.world = required(env, "SLURM_STEP_NUM_TASKS", 1, kMaxRanks, "");
    d.rank = required(env, "SLURM_PROCID", 0, kMaxRanks, "SLURM_STEP_NUM_TASKS is");
    const std::string* per_node = find(env, "SLURM_STEP_TASKS_PER_NODE");
    d.local_world = per_node ? slurm_first_count(*per_node) : d.world;
    d.local_rank = optional_int(env, "SLURM_LOCALID", 0, kMaxRanks, d.rank % d.local_world);
    d.group_rank = optional_int(env, "SLURM_NODEID", 0, kMaxRanks, d.rank / d.local_world);
  } else {
    return std::nullopt;
  }
  FURNACE_CHECK(d.rank < d.world) << "rank " << d.rank << " is not below the world size " << d.world << " (from "
                                  << d.launcher << ")";
  FURNACE_CHECK(d.local_world <= d.world) << "the local world size " << d.local_world << " is larger than the world size "
                                          << d.world << " (from " << d.launcher << ")";
  FURNACE_CHECK(d.local_rank < d.local_world) << "local rank " << d.local_rank << " is not below the local world size "
                                              << d.local_world << " (from " << d.launcher << ")";
  check_and_fill_master(env, d);
  return d;
}

Environment dist_environment_from_os() {
  Environment env;
  for (const char* key : kVariables)
    if (const char* v = std::getenv(key)) env[key] = v;
  return env;
}

}  // namespace furnace
