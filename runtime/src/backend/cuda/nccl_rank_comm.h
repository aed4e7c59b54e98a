// backend/cuda/nccl_rank_comm: one process's NCCL communicator on one GPU, for collectives between
// processes (one process per GPU: ncclCommInitRank from a unique id every rank got through the
// store), as ProcessGroupNCCL holds one: its own communication stream, a watchdog thread polling
// ncclCommGetAsyncError and each collective's end, ncclCommAbort on error or timeout. The
// interface is furnace/backend.h's RankCommunicator. Built only with NCCL (FURNACE_WITH_NCCL).
// Not here: DataParallel's communicators over several GPUs of one process (nccl_comms.h).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <vector>

#include "furnace/backend.h"  // defines: RankCommunicator

namespace furnace::cuda {

// ncclGetUniqueId's bytes (NCCL_UNIQUE_ID_BYTES).
std::vector<char> nccl_unique_id();

// ncclCommInitRank (non-blocking, polled: a rank that never arrives is an error after `timeout`)
// on `device` as `rank` of `nranks`. `caller` is the device's stream every logical stream of the
// cuda backend maps to: each collective waits for what is queued on it.
std::unique_ptr<RankCommunicator> make_nccl_rank_communicator(const std::vector<char>& id, int rank, int nranks,
                                                              int device, cudaStream_t caller,
                                                              std::chrono::milliseconds timeout);

}  // namespace furnace::cuda
