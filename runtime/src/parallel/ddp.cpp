// parallel/ddp: DistributedDataParallel's Reducer for one rank (see the header).
#include "furnace/ddp.h"

#include <algorithm>

#include "furnace/error.h"

namespace furnace {

DistributedDataParallel::DistributedDataParallel(Runtime& rt, MLP& module, ProcessGroup& group,
                                                 DdpOptions options)
    : rt_(rt),
      module_(module),
      group_(group),
      params_(module.parameters()),
      cap_bytes_(ddp_bucket_cap_bytes(options.bucket_cap_mb)) {
  OpContext ctx{rt_, module_.device(), 0};
  // _sync_module_states: rank 0's parameters, flattened into one buffer (_broadcast_coalesced),
  // broadcast, and copied back into every rank's parameters.
  int64_t total = 0;
  std::vector<Tensor> values;
  for (const Parameter& p : params_) {
    values.push_back(*p.value);
    total += p.value->numel();
  }
  if (total > 0) {
    Tensor flat = Tensor::empty(rt_, Device::cuda(ctx.device), {total});
    ops::cat_flat(ctx, flat, values);
    group_.broadcast(ctx, flat, /*root=*/0);
    int64_t offset = 0;
    for (const Parameter& p : params_) {
      Tensor part = flat.narrow(0, offset, p.value->numel());
      ops::copy_(ctx, *p.value, part);
      offset += p.value->numel();
    }
  }
  buckets_ = ddp_initial_buckets(params_.size());
  allocate_buckets();
}

DistributedDataParallel::~DistributedDataParallel() = default;

std::vector<size_t> DistributedDataParallel::bucket_bytes() const {
  std::vector<size_t> out;
  for (const Tensor& b : buffers_) out.push_back(b.nbytes());
  return out;
}

void DistributedDataParallel::allocate_buckets() {
  buffers_.clear();  // the old buckets' memory goes back to the caching allocator first
  bucket_of_.assign(params_.size(), 0);
  offset_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t n = 0;
    for (size_t p : buckets_[b]) {
      bucket_of_[p] = b;
      offset_of_[p] = static_cast<size_t>(n);
      n += params_[p].value->numel();
    }
    buffers_.push_back(Tensor::empty(rt_, Device::cuda(module_.device()), {n}));
  }
}

Tensor DistributedDataParallel::forward(OpContext& ctx, const Tensor& x) {
  if (!rebuilt_ && ready_order_.size() == params_.size()) {
    std::vector<size_t> bytes;
    for (const Parameter& p : params_) bytes.push_back(p.value->nbytes());
    buckets_ = ddp_rebuilt_buckets(ready_order_, bytes, cap_bytes_);
    allocate_buckets();
    rebuilt_ = true;
  }
  return module_.forward(ctx, x);
}

void DistributedDataParallel::backward(OpContext& ctx, const Tensor& dlogits) {
  if (!sync_) {
    module_.backward(ctx, dlogits);
    return;
  }
  pending_.clear();
  for (const auto& bucket : buckets_) pending_.push_back(bucket.size());
  next_bucket_ = 0;
  works_.clear();
  const bool record = !rebuilt_ && ready_order_.empty();
  module_.backward(ctx, dlogits, [&](size_t layer) {
    // A Linear's bias gradient is ready before its weight's (parameters 2i and 2i + 1).
    for (size_t p : {2 * layer + 1, 2 * layer}) {
      if (record) ready_order_.push_back(p);
      mark_ready(ctx, p);
    }
  });
  if (record && ready_order_.size() != params_.size()) ready_order_.clear();
  finalize(ctx);
}

void DistributedDataParallel::mark_ready(OpContext& ctx, size_t param) {
  FURNACE_ASSERT(param < params_.size()) << "DDP: parameter " << param << " of " << params_.size();
  const size_t b = bucket_of_[param];
  Tensor view = buffers_[b].narrow(0, static_cast<int64_t>(offset_of_[param]), params_[param].value->numel());
  // bucket_view = grad * (1 / world_size): at::mul_out with the reciprocal as a scalar.
  ops::mul_scalar(ctx, view, *params_[param].grad, static_cast<float>(1.0 / group_.size()));
  FURNACE_ASSERT(pending_[b] > 0) << "DDP: bucket " << b << " marked ready twice";
  if (--pending_[b] == 0) launch_ready_buckets(ctx);
}

// Buckets are all-reduced in index order: a finished bucket waits for the ones before it.
void DistributedDataParallel::launch_ready_buckets(OpContext& ctx) {
  while (next_bucket_ < buckets_.size() && pending_[next_bucket_] == 0) {
    works_.push_back(group_.all_reduce_async(ctx, buffers_[next_bucket_]));
    stats_.comm_s += works_.back()->modelled_seconds();
    stats_.bytes += buffers_[next_bucket_].nbytes();
    ++stats_.all_reduces;
    ++next_bucket_;
  }
}

// Reducer::finalize_backward: the compute stream waits for every bucket's all-reduce, then the
// averaged buckets are copied back into .grad.
void DistributedDataParallel::finalize(OpContext& ctx) {
  FURNACE_ASSERT(next_bucket_ == buckets_.size())
      << "DDP: " << buckets_.size() - next_bucket_ << " buckets were never all-reduced";
  const double before = rt_.backend().stream_time(ctx.device, ctx.stream);
  for (auto& w : works_) w->wait(ctx);
  stats_.exposed_s += rt_.backend().stream_time(ctx.device, ctx.stream) - before;
  works_.clear();
  // On the simulator the copy back is modelled (clock, trace) but moves no bytes: .grad becomes a
  // tensor that reads its bucket's averaged elements and keeps holding its own allocation, as the
  // device's memory counts it. Nothing writes the bucket again before zero_grad() frees that
  // .grad: the next write is the next synchronised backward's, into a fresh one, or (.grad kept
  // across micro-steps) through .grad itself. A device backend copies.
  Backend& backend = rt_.backend();
  const bool elide = backend.host_accessible();
  for (size_t p = 0; p < params_.size(); ++p) {
    Tensor& grad = *params_[p].grad;
    Tensor view = buffers_[bucket_of_[p]].narrow(0, static_cast<int64_t>(offset_of_[p]), params_[p].value->numel());
    if (elide && backend.model_copy(CopyKind::d2d, ctx.device, ctx.device, view.nbytes(), ctx.stream, false))
      grad = Tensor::alias(view.reshape(grad.shape()), grad.device(), grad);
    else
      ops::copy_(ctx, grad, view);
  }
  ++stats_.backwards;
}

}  // namespace furnace
