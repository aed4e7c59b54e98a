// furnace/process_group.h: c10d's ProcessGroup, the one place for collectives between ranks
// (torch.distributed.all_reduce, broadcast, barrier), which DistributedDataParallel's buckets go
// through. A ProcessGroup is one rank's handle on a group of size() ranks; each rank drives one
// device, with its own Runtime (its own allocator, as a process of torchrun's has). As in c10d,
// every rank calls every collective, in the same order, with tensors of the same size and dtype;
// here a mismatch is an error on every rank that names the ranks and what they passed (c10d
// checks this only under TORCH_DISTRIBUTED_DEBUG=DETAIL; NCCL and Gloo otherwise hang or
// corrupt), and a rank that never arrives is a timeout error, never a hang.
//
// What a collective costs is put on each rank's device clock where the clock is modelled (the
// simulator): every rank waits for the last one to arrive (a straggler holds up the group), then
// the ring algorithm NCCL uses moves the bytes over the links of the ring of ranks' GPUs
// (model_ring_seconds, backend.h).
//
// Not here: DataParallel's collectives, which are torch.cuda.comm's (one caller holding every
// device's tensors; parallel/comm.h), not a group of ranks.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "furnace/ops.h"       // defines: OpContext
#include "furnace/tensor.h"    // defines: Tensor
#include "furnace/topology.h"  // defines: Topology

namespace furnace {

// torch.distributed.ReduceOp; DDP's gradient reduction is SUM (of gradients divided by the world
// size beforehand).
enum class ReduceOp { sum };

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // torch.distributed.get_backend(): "threads" for ranks on threads of this process.
  virtual std::string backend_name() const = 0;

  // Every rank's `t` (f32, on ctx.device) becomes the elementwise reduction of all of them,
  // added in rank order: ((t0 + t1) + t2) + ... on every rank (the same bits everywhere).
  virtual void all_reduce(OpContext& ctx, Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // Every rank's `t` becomes a copy of rank `root`'s.
  virtual void broadcast(OpContext& ctx, Tensor& t, int root) = 0;
  // Returns on every rank once all have called it.
  virtual void barrier() = 0;
};

struct ThreadGroupOptions {
  // torch.distributed's default timeout for NCCL and Gloo is 10 minutes (30 for NCCL before 2.2);
  // a test or a lesson wants less. A rank waiting longer for the others throws.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // The machine the ranks' GPUs belong to, numbered as Backend::physical_index numbers them: the
  // links a modelled collective crosses. Unset (no GPUs): nothing is modelled.
  const Topology* topology = nullptr;
};

// A group of `world_size` ranks that run on threads of this process: element r is rank r's
// handle; give each rank's thread its own. Bytes move through host memory (a device tensor is
// copied to the host and back unless the backend's memory is host memory, as the simulator's).
std::vector<std::unique_ptr<ProcessGroup>> make_thread_group(int world_size,
                                                             ThreadGroupOptions options = {});

}  // namespace furnace
