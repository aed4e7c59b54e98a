// parallel/ddp: DistributedDataParallel's Reducer for one rank (see the header).
#include "furnace/ddp.h"

#include <algorithm>

#include "furnace/error.h"
#include "furnace/op_table.h"       // defines: cpu_linear_weight_grad
#include "parallel/gemm_exactness.h"  // defines: scaled_is_exact

namespace furnace {

DistributedDataParallel::DistributedDataParallel(Runtime& rt, MLP& module, ProcessGroup& group,
                                                 DdpOptions options)
    : rt_(rt),
      module_(module),
      group_(group),
      params_(module.parameters()),
      cap_bytes_(ddp_bucket_cap_bytes(options.bucket_cap_mb)),
      scale_in_weight_gemm_(options.scale_in_weight_gemm) {
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
  forward_autocast_ = ctx.autocast;
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
  in_bucket_.assign(params_.size(), 0);
  struct SinkReset {  // no later backward (no_sync's, or after a throw) may inherit the sink
    MLP& module;
    ~SinkReset() { module.set_weight_grad_sink(nullptr); }
  } reset{module_};
  module_.set_weight_grad_sink(scale_in_gemm_now(dlogits) ? &scaled_sink_ : nullptr);
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
  if (in_bucket_[param])
    ops::mul_scalar_modelled(ctx, view);  // the weight's GEMM wrote the product (ScaledIntoBucket)
  else
    ops::mul_scalar(ctx, view, *params_[param].grad, static_cast<float>(1.0 / group_.size()));
  FURNACE_ASSERT(pending_[b] > 0) << "DDP: bucket " << b << " marked ready twice";
  if (--pending_[b] == 0) launch_ready_buckets(ctx);
}

// The fused scale applies to a synchronised backward that creates every .grad (the first after
// zero_grad: an accumulating one adds to .grad before the scale), in fp32, on the simulator, for
// shapes where OpenBLAS gives the unfused bits.
bool DistributedDataParallel::scale_in_gemm_now(const Tensor& dlogits) const {
  if (!scale_in_weight_gemm_ || !rt_.backend().host_accessible() || is_half(forward_autocast_))
    return false;
  for (const Parameter& p : params_)
    if (p.grad->defined()) return false;
  const std::vector<int>& sizes = module_.sizes();
  const float alpha = static_cast<float>(1.0 / group_.size());
  for (size_t l = 0; l + 1 < sizes.size(); ++l)
    if (!parallel::scaled_is_exact(sizes[l + 1], sizes[l], dlogits.size(0), alpha)) return false;
  return true;
}

void DistributedDataParallel::ScaledIntoBucket::take(size_t layer, const Tensor& dout,
                                                     const Tensor& input) {
  const size_t param = 2 * layer;  // parameters() lists each layer's weight, then its bias
  DistributedDataParallel& d = ddp_;
  Tensor view = d.buffers_[d.bucket_of_[param]].narrow(0, static_cast<int64_t>(d.offset_of_[param]),
                                                       d.params_[param].value->numel());
  const int out = static_cast<int>(dout.size(1)), in = static_cast<int>(input.size(1));
  FURNACE_CHECK(dout.size(0) == input.size(0) && view.numel() == int64_t{out} * in)
      << "DDP: layer " << layer << "'s gradient does not fit its bucket view";
  cpu_linear_weight_grad(view.data<float>(), dout.data<float>(), input.data<float>(),
                         static_cast<int>(dout.size(0)), in, out, /*accumulate=*/false,
                         static_cast<float>(1.0 / d.group_.size()));
  d.in_bucket_[param] = 1;
  ++d.stats_.scaled_in_gemm;
}

// Buckets are all-reduced in index order: a finished bucket waits for the ones before it.
void DistributedDataParallel::launch_ready_buckets(OpContext& ctx) {
  while (next_bucket_ < buckets_.size() && pending_[next_bucket_] == 0) {
    works_.push_back(group_.all_reduce_async(ctx, buffers_[next_bucket_]));
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
  // Known once every rank launched it: asked at launch, it would hold this rank there.
  for (auto& w : works_) stats_.comm_s += w->modelled_seconds();
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
