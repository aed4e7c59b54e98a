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
  if (!get("RANK") && !get("WORLD_SIZE")) return std::nullopt;
  auto required = [&](const char* name) -> std::string {
    const char* v = get(name);
    if (!v)
      throw Error(std::string("Error initializing torch.distributed using env:// rendezvous: environment variable ") +
                  name + " expected, but not set");
    return v;
  };
  auto number = [&](const char* name, const std::string& text, int lo, int hi) {
    const std::optional<int> v = whole_int(text, lo, hi);
    if (!v)
      throw Error(std::string(name) + "='" + printable_clipped(text) + "' is not an integer in [" + std::to_string(lo) +
                  ", " + std::to_string(hi) + "]");
    return *v;
  };
  WorkerEnv w;
  w.world_size = number("WORLD_SIZE", required("WORLD_SIZE"), 1, 1'000'000);
  w.rank = number("RANK", required("RANK"), 0, w.world_size - 1);
  w.master_addr = required("MASTER_ADDR");
  if (w.master_addr.empty()) throw Error("MASTER_ADDR is empty");
  w.master_port = number("MASTER_PORT", required("MASTER_PORT"), 1, 65535);
  w.local_world_size = get("LOCAL_WORLD_SIZE") ? number("LOCAL_WORLD_SIZE", get("LOCAL_WORLD_SIZE"), 1, w.world_size)
                                               : w.world_size;
  w.local_rank = get("LOCAL_RANK") ? number("LOCAL_RANK", get("LOCAL_RANK"), 0, w.local_world_size - 1) : w.rank % w.local_world_size;
  w.group_rank = get("GROUP_RANK") ? number("GROUP_RANK", get("GROUP_RANK"), 0, w.world_size - 1) : 0;
  if (const char* id = get("TORCHELASTIC_RUN_ID")) w.run_id = id;
  return w;
}

}  // namespace furnace
