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

// c10d's Work: an asynchronous collective in flight. wait(ctx) is WorkNCCL::wait: ctx's stream
// waits for the collective's end on the communication stream (the host does not block); the
// tensor holds the result for work queued on that stream afterwards.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait(OpContext& ctx) = 0;
  // The collective's modelled duration on the communication stream (0 where not modelled); it
  // depends on every rank, so on ranks that are threads it waits for the last one to call it.
  virtual double modelled_seconds() const { return 0; }
};

class ProcessGroup {
 public:
  // The stream a rank's collectives run on, ProcessGroupNCCL's own stream on each device: a
  // collective starts once the caller's stream has reached the call (an event it waits for), so
  // it overlaps whatever the caller queues after it (DDP's buckets and the rest of backward).
  static constexpr int kCommStream = 1;

  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // torch.distributed.get_backend(): "threads" for ranks on threads of this process.
  virtual std::string backend_name() const = 0;

  // all_reduce(async_op=True): every rank's `t` (f32, on ctx.device) becomes the elementwise
  // reduction of all of them, added in rank order: ((t0 + t1) + t2) + ... on every rank (the same
  // bits everywhere), on kCommStream after ctx.stream's work so far.
  virtual std::unique_ptr<Work> all_reduce_async(OpContext& ctx, Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // all_reduce(): the same, and ctx's stream waits for it.
  void all_reduce(OpContext& ctx, Tensor& t, ReduceOp op = ReduceOp::sum) { all_reduce_async(ctx, t, op)->wait(ctx); }
  // Every rank's `t` becomes a copy of rank `root`'s; ctx's stream waits for it.
  virtual void broadcast(OpContext& ctx, Tensor& t, int root) = 0;
  // Returns on every rank once all have called it.
  virtual void barrier() = 0;
  // ProcessGroupNCCL::abort: this rank gives up (its training failed); every rank waiting in or
  // later calling a collective of the group gets an error naming this rank and `reason` at once,
  // instead of waiting for the timeout.
  virtual void abort(const std::string& reason) = 0;
};

// What every collective checks of its tensor: defined, f32, on the caller's device (ctx.device).
// Throws one line naming the collective (`name`) and `rank`.
void check_collective_tensor(const OpContext& ctx, const Tensor& t, const char* name, int rank);

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
