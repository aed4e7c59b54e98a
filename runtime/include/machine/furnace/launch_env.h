// furnace/launch_env.h: the launch contract, torchrun's: the variables a launcher (`furnace launch`)
// gives each worker process, and the worker's side that reads them back. semantics.md section 8.
// Not here: starting and supervising the workers (furnace/worker_group.h), process groups and
// stores (the parallel layer reads WorkerEnv).
//
// For a worker with local rank l on node n of `nnodes`, each running `nproc_per_node` workers:
//   RANK = n * nproc_per_node + l         LOCAL_RANK = l
//   WORLD_SIZE = nnodes * nproc_per_node  LOCAL_WORLD_SIZE = nproc_per_node
//   GROUP_RANK = n                        GROUP_WORLD_SIZE = nnodes
//   ROLE_RANK, ROLE_WORLD_SIZE: as RANK and WORLD_SIZE (one role, ROLE_NAME "default")
//   MASTER_ADDR, MASTER_PORT: where rank 0 hosts the key-value store
//   TORCHELASTIC_RESTART_COUNT = 0, TORCHELASTIC_MAX_RESTARTS = 0 (no restarts),
//   TORCHELASTIC_RUN_ID (torchrun's --rdzv-id, "none" by default), TORCHELASTIC_USE_AGENT_STORE
//   = False (the store is rank 0's, not the launcher's).
// `furnace launch` adds FURNACE_LAUNCHER=furnace launch, so a worker names the launcher that
// started it (torchrun sets the rest alike).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace furnace {

// One node's part of a launch: what `furnace launch`'s flags say.
struct LaunchLayout {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: pick a free one (only with nnodes == 1; pick_free_port)
  std::string run_id = "none";

  int world_size() const { return nnodes * nproc_per_node; }
  int global_rank(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
};

// Throws furnace::Error, one line naming the flag, when the layout cannot be launched:
// nproc_per_node or nnodes below 1, node_rank outside [0, nnodes), a port outside [0, 65535], port 0
// with several nodes, an empty master address or run id.
void check_launch_layout(const LaunchLayout& layout);

// The variables (name, value) a worker with this local rank gets, in the order listed above; they
// replace the same names inherited from the launcher's environment.
std::vector<std::pair<std::string, std::string>> worker_environment(const LaunchLayout& layout, int local_rank);

// A TCP port on `address` (an IPv4 or IPv6 literal, or a host name) that was free a moment ago:
// the kernel's pick for a socket bound to port 0, closed again. Throws furnace::Error when the
// address does not resolve or nothing can be bound there.
int pick_free_port(const std::string& address);

// What a launcher told this worker (the worker's side of the contract).
struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // LOCAL_RANK, or rank % local_world_size when not set
  int local_world_size = 1;  // LOCAL_WORLD_SIZE, or world_size when not set
  int group_rank = 0;        // GROUP_RANK (the node), or rank / local_world_size when not set
  std::string master_addr;
  int master_port = 0;
  std::string run_id;  // TORCHELASTIC_RUN_ID, empty when not set
  std::string launcher;  // whose variables these were: "furnace launch", "torchrun", "Open MPI" or "Slurm"
};

// Reads the contract through `getenv` (::getenv by default). std::nullopt when no launcher started
// this process. torchrun's variables first: with RANK or WORLD_SIZE set, RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT are required, as init_process_group("env://") requires them; a
// missing one throws furnace::Error in PyTorch's words ("Error initializing torch.distributed using
// env:// rendezvous: environment variable RANK expected, but not set"). Else Open MPI's mpirun
// (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE) or Slurm's srun (SLURM_PROCID,
// SLURM_STEP_NUM_TASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE), which do not set
// MASTER_ADDR / MASTER_PORT: 127.0.0.1:29500 on one node, required across nodes. A value that is
// not a number in range throws one line naming the variable.
using GetEnv = std::function<const char*(const char*)>;
std::optional<WorkerEnv> worker_env_from_environment(const GetEnv& getenv = {});

// Every variable worker_env_from_environment reads, for a program that passes its environment on.
const std::vector<std::string>& worker_variable_names();

}  // namespace furnace
