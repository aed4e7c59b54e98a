// furnace/dist_env.h: who this process is in a multi-process job, read from the variables its
// launcher set (semantics.md section 8). torchrun and `furnace launch` set RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT; Open MPI's mpirun sets
// OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE; Slurm's srun sets SLURM_PROCID,
// SLURM_STEP_NUM_TASKS, SLURM_LOCALID and SLURM_NODEID. MASTER_ADDR / MASTER_PORT name where rank
// 0 hosts the rendezvous store; mpirun and srun do not set them, so a one-node job defaults them
// to 127.0.0.1:29500 and a job over several nodes must set them.
// Not here: starting the processes (furnace launch), the store and the group (tcp_store.h,
// gloo_group.h).
#pragma once

#include <optional>
#include <string>

#include "furnace/process.h"  // defines: Environment

namespace furnace {

struct DistEnv {
  int rank = 0;         // RANK: 0 .. world-1, over every node
  int world = 1;        // WORLD_SIZE
  int local_rank = 0;   // LOCAL_RANK: which of this node's processes; picks cuda:local_rank
  int local_world = 1;  // LOCAL_WORLD_SIZE: processes on this node
  int group_rank = 0;   // GROUP_RANK: this node's index (torchrun's node rank)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher;  // "torchrun or furnace launch", "Open MPI", "Slurm"

  // "rank 3 of 8 (local rank 1 of 4 on node 1), store at 10.0.0.1:29500, from Open MPI"
  std::string describe() const;
};

// The launcher's variables in `env` (this process's environment); nullopt when no launcher
// started this process (no WORLD_SIZE, no OMPI_COMM_WORLD_SIZE, no SLURM_STEP_NUM_TASKS). Throws
// furnace::Error, one line naming the variable, for a value that is not a number or out of range
// (RANK >= WORLD_SIZE, LOCAL_RANK >= LOCAL_WORLD_SIZE, a port outside 1..65535, RANK set without
// WORLD_SIZE, a multi-node MPI/Slurm job without MASTER_ADDR).
std::optional<DistEnv> read_dist_env(const Environment& env);

// This real process's environment, every variable read_dist_env looks at.
Environment dist_environment_from_os();

}  // namespace furnace
