// furnace/ddp.h: torch.nn.parallel.DistributedDataParallel(module, device_ids=[device]) as one rank
// holds it (shared/reference/semantics.md section 7; PyTorch 1.13 distributed.py and reducer.cpp).
// Every rank runs the same training step on its own batch with its own full copy of the model;
// DDP keeps the copies identical:
//   - construction: rank 0's parameters are broadcast to every rank (_sync_module_states);
//   - backward: each gradient, as soon as autograd has finished it, is copied into its bucket
//     divided by the world size (Reducer::mark_variable_ready_dense); when a bucket's last gradient
//     is in, the bucket's all-reduce (SUM) starts on the group's communication stream while
//     backward carries on; at the end of backward the compute stream waits for every bucket and
//     the buckets are copied back into .grad, which then holds the mean over ranks;
//   - buckets (furnace/ddp_buckets.h): one bucket in iteration 1, then rebuilt at the next forward
//     over the order the gradients became ready, [1 MiB, cap, cap, ...];
//   - no_sync(): no bucket, no all-reduce; gradients accumulate locally until a backward outside
//     it, whose all-reduce carries the accumulated sum.
// Defaults as DDP's: gradient_as_bucket_view=False (each bucket is its own buffer, as much memory
// again as the gradients), find_unused_parameters=False, no communication hook.
// Not here: ranks and their collectives (furnace/process_group.h), DataParallel (parallel.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "furnace/ddp_buckets.h"    // defines: DdpBuckets
#include "furnace/nn.h"             // defines: MLP
#include "furnace/process_group.h"  // defines: ProcessGroup, Work

namespace furnace {

struct DdpOptions {
  double bucket_cap_mb = 25.0;  // DDP's bucket_cap_mb (ddp_bucket_cap_bytes checks it)
  // On the simulator, a weight gradient's GEMM writes grad / world_size straight into its bucket
  // (alpha = 1 / world_size) where that gives the bits of the GEMM and the scale apart
  // (parallel/gemm_exactness); the grad's own bytes stay unwritten, both kernels are modelled.
  // One pass over the gradients fewer. false: every byte as PyTorch's kernels write them.
  bool scale_in_weight_gemm = true;
};

// What one rank's DDP did, summed over its synchronised backwards (modelled seconds; 0 where the
// clock is not modelled).
struct DdpCommStats {
  int64_t backwards = 0;    // backwards that all-reduced (not under no_sync)
  int64_t all_reduces = 0;  // bucket all-reduces
  uint64_t bytes = 0;       // bytes all-reduced by this rank
  double comm_s = 0;        // the all-reduces' time on the communication stream
  double exposed_s = 0;     // what the compute stream waited for them at the end of backward
  // Weight gradients whose GEMM wrote grad / world_size into the bucket itself (the simulator;
  // DdpOptions::scale_in_weight_gemm). Host work only: nothing modelled depends on it.
  int64_t scaled_in_gemm = 0;
};

class DistributedDataParallel {
 public:
  // `module` lives on its device (the rank's); `group` is this rank's handle. Broadcasts rank 0's
  // parameters (a collective: every rank constructs at the same time) and allocates the first
  // bucket. Throws furnace::Error for a bad bucket_cap_mb.
  DistributedDataParallel(Runtime& rt, MLP& module, ProcessGroup& group, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  MLP& module() { return module_; }
  ProcessGroup& group() { return group_; }

  // The module's forward; the first forward after the first synchronised backward rebuilds the
  // buckets (Reducer::rebuild_buckets).
  Tensor forward(OpContext& ctx, const Tensor& x);
  // The module's backward with the Reducer's hooks (none under no_sync).
  void backward(OpContext& ctx, const Tensor& dlogits);

  // ddp.no_sync(): while it lives, backward neither buckets nor all-reduces.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), was_(ddp.sync_) { ddp_.sync_ = false; }
    ~NoSync() { ddp_.sync_ = was_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool was_;
  };
  bool require_backward_grad_sync() const { return sync_; }

  const DdpBuckets& buckets() const { return buckets_; }
  std::vector<size_t> bucket_bytes() const;  // each bucket's buffer, in all-reduce order
  bool buckets_rebuilt() const { return rebuilt_; }
  const DdpCommStats& stats() const { return stats_; }

 private:
  void allocate_buckets();
  void mark_ready(OpContext& ctx, size_t param);
  void launch_ready_buckets(OpContext& ctx);
  void finalize(OpContext& ctx);
  bool scale_in_gemm_now(const Tensor& dlogits) const;

  // Where the module's weight GEMMs go while scale_in_gemm_now: into their bucket views, scaled.
  class ScaledIntoBucket : public WeightGradSink {
   public:
    explicit ScaledIntoBucket(DistributedDataParallel& ddp) : ddp_(ddp) {}
    void take(size_t layer, const Tensor& dout, const Tensor& input) override;

   private:
    DistributedDataParallel& ddp_;
  };

  Runtime& rt_;
  MLP& module_;
  ProcessGroup& group_;
  std::vector<Parameter> params_;
  size_t cap_bytes_;
  bool scale_in_weight_gemm_;
  DType forward_autocast_ = DType::f32;  // the last forward's autocast dtype (f32: off)
  ScaledIntoBucket scaled_sink_{*this};
  std::vector<char> in_bucket_;  // per parameter, this backward: its bucket view already written
  bool sync_ = true;
  bool rebuilt_ = false;
  std::vector<size_t> ready_order_;  // recorded during the first synchronised backward

  DdpBuckets buckets_;
  std::vector<Tensor> buffers_;          // one flat f32 buffer per bucket
  std::vector<size_t> bucket_of_, offset_of_;  // per parameter: its bucket and element offset
  // The backward in flight.
  std::vector<size_t> pending_;          // per bucket: gradients not yet in
  size_t next_bucket_ = 0;               // buckets launch in order
  std::vector<std::unique_ptr<Work>> works_;
  DdpCommStats stats_;
};

}  // namespace furnace
