// furnace/nccl_group.h: ProcessGroupNCCL, a ProcessGroup whose ranks are separate processes, one
// per GPU, joined by NCCL through the backend's RankCommunicator (furnace/backend.h: only the cuda
// backend built with NCCL has one). Rank 0 makes NCCL's unique id and sets it in the TcpStore; the
// others get it there. As ProcessGroupNCCL does, the communicator is made at the group's first
// collective, on the caller's Runtime and device (DDP's constructor broadcast, which every rank
// calls): the ranks' Runtimes are their TrainingRuns' own, made after the group.
//
// all_reduce_async queues NCCL's all-reduce on the communicator's stream after the caller's
// stream's work so far and returns at once; Work::wait makes the caller's stream wait for it
// (cudaStreamWaitEvent; the host does not block). NCCL's ring adds in its own order: the result
// agrees with the thread group's rank-order sum within fp32 reassociation (exactly for two ranks).
//
// What is checked, and what is not:
//   - every collective's tensor: f32, on this group's device (check_collective_tensor);
//   - ranks calling different collectives (kind, element count, broadcast root): each collective
//     is preceded on the device by a 3-int64-per-rank header all-reduce; the communicator's
//     watchdog reads it back asynchronously and aborts with a line naming both ranks' calls. The
//     header itself always matches in size, so it cannot hang; the mismatched data collective is
//     released by the abort. The check costs one tiny all-reduce per collective and no host wait;
//     the error arrives on the next call (or Work::wait) after the watchdog saw it, not at once.
//   - a dead or hung peer: ncclCommGetAsyncError is polled, and a collective not ended within the
//     timeout aborts the communicator: an error on this rank, never a hang;
//   - NOT checked: a different dtype (only f32 goes through here), or the same count in a
//     different order of buckets (the bytes are summed regardless, as in NCCL). abort() does not
//     reach the other ranks at once: they fail on NCCL's async error or their own timeout
//     (the job's control group, Gloo in ProcessRank, tells them sooner between steps).
#pragma once

#include <chrono>
#include <memory>

#include "furnace/process_group.h"  // defines: ProcessGroup
#include "furnace/tcp_store.h"      // defines: TcpStore

namespace furnace {

struct NcclGroupOptions {
  // init_process_group(timeout=): the unique id's exchange, ncclCommInitRank and every collective.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// Joins the group as `rank` of `size` on cuda:`device` of the Runtime its collectives will be
// called with; every rank calls it with a store at the same address. Nothing touches the device
// until the first collective. The store must outlive the group.
std::unique_ptr<ProcessGroup> make_nccl_group(TcpStore& store, int rank, int size, int device,
                                              NcclGroupOptions options = {});

}  // namespace furnace
