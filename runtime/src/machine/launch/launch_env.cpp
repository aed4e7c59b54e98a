// The launch contract (furnace/launch_env.h): checking a layout, the variables of one worker, and
// reading them back in the worker. Not here: pick_free_port (free_port.cpp).
#include "furnace/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "furnace/error.h"

namespace furnace {

void check_launch_layout(const LaunchLayout& l) {
  if (l.nproc_per_node < 1)
    throw Error("--nproc-per-node must be at least 1 (got " + std::to_string(l.nproc_per_node) + ")");
  if (l.nnodes < 1) throw Error("--nnodes must be at least 1 (got " + std::to_string(l.nnodes) + ")");
  if (l.node_rank < 0 || l.node_rank >= l.nnodes)
    throw Error("--node-rank " + std::to_string(l.node_rank) + " is outside [0, " + std::to_string(l.nnodes - 1) +
                "] for --nnodes " + std::to_string(l.nnodes));
  if (l.master_port < 0 || l.master_port > 65535)
    throw Error("--master-port must be in [0, 65535] (got " + std::to_string(l.master_port) + ")");
  // Each node would pick a different port: the workers of the other nodes could not find rank 0.
  if (l.master_port == 0 && l.nnodes > 1)
    throw Error("--master-port 0 (pick a free port) needs --nnodes 1: every node must be given the same port");
  if (l.master_addr.empty()) throw Error("--master-addr is empty");
  if (l.run_id.empty()) throw Error("--rdzv-id is empty");
  // A world size that overflows int would give negative ranks.
  if (l.nproc_per_node > 1'000'000 || l.nnodes > 1'000'000 ||
      static_cast<long long>(l.nproc_per_node) * l.nnodes > 1'000'000)
    throw Error("--nnodes x --nproc-per-node must be at most 1000000 (got " + std::to_string(l.nnodes) + " x " +
                std::to_string(l.nproc_per_node) + ")");
}

std::vector<std::pair<std::string, std::string>> worker_environment(const LaunchLayout& l, int local_rank) {
  const std::string rank = std::to_string(l.global_rank(local_rank));
  const std::string world = std::to_string(l.world_size());
  return {
      {"RANK", rank},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", world},
      {"LOCAL_WORLD_SIZE", std::to_string(l.nproc_per_node)},
      {"GROUP_RANK", std::to_string(l.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(l.nnodes)},
      {"ROLE_RANK", rank},
      {"ROLE_WORLD_SIZE", world},
      {"ROLE_NAME", "default"},
      {"MASTER_ADDR", l.master_addr},
      {"MASTER_PORT", std::to_string(l.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"TORCHELASTIC_RUN_ID", l.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"FURNACE_LAUNCHER", "furnace launch"},
  };
}

namespace {

// The whole of `text` as an int in [lo, hi], or nothing.
std::optional<int> whole_int(std::string_view text, int lo, int hi) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

}  // namespace

std::optional<WorkerEnv> worker_env_from_environment(const GetEnv& getenv_fn) {
  const GetEnv get = getenv_fn ? getenv_fn : GetEnv([](const char* n) { return std::getenv(n); });
  auto number = [&](const char* name, const std::string& text, int lo, int hi) {
    const std::optional<int> v = whole_int(text, lo, hi);
    if (!v)
      throw Error(std::string(name) + "='" + printable_clipped(text) + "' is not an integer in [" + std::to_string(lo) +
                  ", " + std::to_string(hi) + "]");
    return *v;
  };
  // `name` in [lo, hi], or `fallback` when not set.
  auto optional = [&](const char* name, int lo, int hi, int fallback) {
    const char* v = get(name);
    return v ? number(name, v, lo, hi) : fallback;
  };
  auto required_by = [&](const char* name, const char* launcher) -> std::string {
    const char* v = get(name);
    if (!v) throw Error(std::string(name) + " is not set, but " + launcher + "'s other variables are");
    return v;
  };
  constexpr int kMaxRanks = 1'000'000;
  WorkerEnv w;
  if (get("RANK") || get("WORLD_SIZE")) {
    auto required = [&](const char* name) -> std::string {
      const char* v = get(name);
      if (!v)
        throw Error(std::string("Error initializing torch.distributed using env:// rendezvous: environment variable ") +
                    name + " expected, but not set");
      return v;
    };
    const char* launcher = get("FURNACE_LAUNCHER");  // torchrun's variables, set by furnace launch
    w.launcher = launcher && std::string_view(launcher) == "furnace launch" ? "furnace launch" : "torchrun";
    w.world_size = number("WORLD_SIZE", required("WORLD_SIZE"), 1, kMaxRanks);
    w.rank = number("RANK", required("RANK"), 0, w.world_size - 1);
    w.master_addr = required("MASTER_ADDR");
    if (w.master_addr.empty()) throw Error("MASTER_ADDR is empty");
    w.master_port = number("MASTER_PORT", required("MASTER_PORT"), 1, 65535);
    w.local_world_size = optional("LOCAL_WORLD_SIZE", 1, w.world_size, w.world_size);
    w.local_rank = optional("LOCAL_RANK", 0, w.local_world_size - 1, w.rank % w.local_world_size);
    w.group_rank = optional("GROUP_RANK", 0, w.world_size - 1, w.rank / w.local_world_size);
    if (const char* id = get("TORCHELASTIC_RUN_ID")) w.run_id = id;
    return w;
  }
  if (get("OMPI_COMM_WORLD_SIZE")) {
    w.launcher = "Open MPI";
    w.world_size = number("OMPI_COMM_WORLD_SIZE", get("OMPI_COMM_WORLD_SIZE"), 1, kMaxRanks);
    w.rank = number("OMPI_COMM_WORLD_RANK", required_by("OMPI_COMM_WORLD_RANK", "Open MPI"), 0, w.world_size - 1);
    w.local_world_size = optional("OMPI_COMM_WORLD_LOCAL_SIZE", 1, w.world_size, w.world_size);
    w.local_rank = optional("OMPI_COMM_WORLD_LOCAL_RANK", 0, w.local_world_size - 1, w.rank % w.local_world_size);
    w.group_rank = w.rank / w.local_world_size;  // mpirun fills one node after the other (--map-by slot)
  } else if (get("SLURM_STEP_NUM_TASKS")) {
    w.launcher = "Slurm";
    w.world_size = number("SLURM_STEP_NUM_TASKS", get("SLURM_STEP_NUM_TASKS"), 1, kMaxRanks);
    w.rank = number("SLURM_PROCID", required_by("SLURM_PROCID", "Slurm"), 0, w.world_size - 1);
    // SLURM_STEP_TASKS_PER_NODE: "4", "4(x2)" or "4(x2),3"; this node's count is the first one's
    // on a job with equal nodes, the only kind DDP's LOCAL_RANK arithmetic supports.
    if (const char* per_node = get("SLURM_STEP_TASKS_PER_NODE")) {
      const std::string text = per_node;
      w.local_world_size = number("SLURM_STEP_TASKS_PER_NODE", text.substr(0, text.find_first_of("(,")), 1, w.world_size);
    } else {
      w.local_world_size = w.world_size;
    }
    w.local_rank = optional("SLURM_LOCALID", 0, w.local_world_size - 1, w.rank % w.local_world_size);
    w.group_rank = optional("SLURM_NODEID", 0, w.world_size - 1, w.rank / w.local_world_size);
  } else {
    return std::nullopt;
  }
  // mpirun and srun do not say where rank 0 is: on one node it is here; across nodes the job must
  // export MASTER_ADDR and MASTER_PORT, as PyTorch's env:// asks of such a job too.
  const char* addr = get("MASTER_ADDR");
  if (!addr && w.local_world_size < w.world_size)
    throw Error("MASTER_ADDR is not set: a job over several nodes (" + std::to_string(w.world_size) + " ranks, " +
                std::to_string(w.local_world_size) + " on this node, started by " + w.launcher +
                ") needs MASTER_ADDR and MASTER_PORT naming rank 0's host; export them for every rank");
  w.master_addr = addr ? addr : "127.0.0.1";
  if (w.master_addr.empty()) throw Error("MASTER_ADDR is empty");
  w.master_port = optional("MASTER_PORT", 1, 65535, 29500);
  return w;
}

const std::vector<std::string>& worker_variable_names() {
  static const std::vector<std::string> names = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
      "TORCHELASTIC_RUN_ID", "FURNACE_LAUNCHER", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID",
      "SLURM_STEP_TASKS_PER_NODE"};
  return names;
}

}  // namespace furnace
