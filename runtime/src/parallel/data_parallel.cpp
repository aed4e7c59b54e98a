// parallel/data_parallel: torch.nn.DataParallel composed of the four verbs: the constructor's
// checks and defaults, forward = scatter -> replicate -> parallel_apply -> gather, and the explicit
// backward (gather's backward -> replicas' backward in parallel -> reduce-add onto device_ids[0]).
// torch/nn/parallel/data_parallel.py. Not here: the verbs themselves (one file each), the loss
// and the optimizer (the caller's, on output_device and device_ids[0]).
#include <algorithm>
#include <cstdint>  // defines: SIZE_MAX
#include <cstdio>

#include "furnace/error.h"     // defines: FURNACE_CHECK
#include "furnace/op_table.h"  // defines: CpuGemmThreadsScope
#include "furnace/parallel.h"  // defines: DataParallel, the verbs
#include "parallel/comm.h"     // defines: host_cores
#include "parallel/weight_grad_chain.h"  // defines: WeightGradChain

namespace furnace {
namespace {

std::vector<int> timeline_devices(const std::vector<int>& ids, int output_device) {
  std::vector<int> out = ids;
  if (!ids.empty() && std::find(ids.begin(), ids.end(), output_device) == ids.end() &&
      output_device >= 0)
    out.push_back(output_device);
  return out;
}

std::vector<int> resolve_ids(Runtime& rt, const std::optional<std::vector<int>>& device_ids) {
  if (rt.device_count() == 0) return {};  // no accelerator: DataParallel keeps the module as is
  if (device_ids) return *device_ids;
  std::vector<int> all(static_cast<size_t>(rt.device_count()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return all;
}

int resolve_output(Runtime& rt, const std::vector<int>& ids,
                   const std::optional<int>& output_device) {
  if (rt.device_count() == 0) return -1;
  // output_device = device_ids[0] when not given; src_device_obj reads device_ids[0] either way.
  FURNACE_CHECK(!ids.empty()) << "list index out of range";
  return output_device ? *output_device : ids[0];
}

// On the simulator, the replicas' forward and backward run on at most one thread per host core.
// PyTorch gives each replica a thread of its own, which only launches kernels, as the CUDA
// backend's do (so it keeps one each); the simulator's threads do the GPUs' work, and more of
// them than cores only take turns. Measured on 2 cores, DataParallel over 8 simulated GPUs
// (`furnace train`, one epoch, pairs alternated): 8 threads 24,000-29,600 samples/s, 2 threads
// 29,000-30,400. The replicas never wait for one another, so any thread may run any.
size_t replica_threads(Runtime& rt) {
  return rt.backend().host_accessible() ? parallel::host_cores() : SIZE_MAX;
}

}  // namespace

void print_user_warning(const std::string& message) {
  std::fprintf(stderr, "UserWarning: %s\n", message.c_str());
}

DataParallel::DataParallel(Runtime& rt, MLP& module, std::optional<std::vector<int>> device_ids,
                           std::optional<int> output_device, WarningHandler warn)
    : rt_(rt),
      module_(module),
      device_ids_(resolve_ids(rt, device_ids)),
      output_device_(resolve_output(rt, device_ids_, output_device)),
      warn_(std::move(warn)),
      timeline_(rt, timeline_devices(device_ids_, output_device_)) {
  if (device_ids_.empty()) return;
  imbalance_ = parallel::find_imbalance(rt_, device_ids_);  // _check_balance: a warning, not an error
  if (imbalance_) warn_once(parallel::imbalance_warning(*imbalance_));
  if (device_ids_.size() == 1) {  // with one device DataParallel moves the module there itself
    OpContext ctx{rt_, device_ids_[0], 0};
    module_.to(ctx, device_ids_[0]);
  }
}

DataParallel::~DataParallel() = default;

bool DataParallel::chain_weight_grads() {
  // One chunk (a batch of fewer rows than there are devices per chunk) is one replica: its reduce
  // returns its own gradients as they are, which must then be written.
  if (!rt_.backend().host_accessible() || is_half(forward_autocast_) || used_devices_.size() < 2)
    return false;
  if (!weight_grads_) weight_grads_ = std::make_unique<parallel::WeightGradChain>();
  CpuGemmThreadsScope one_blas_thread(1);  // the replicas' GEMMs run on one thread each
  return weight_grads_->arm(module_.sizes(), last_chunks_);
}

void DataParallel::warn_once(const std::string& message) {
  if (warn_ && warned_.insert(message).second) warn_(message);
}

void DataParallel::check_placement() const {
  const Device src = Device::cuda(device_ids_[0]);
  for (const Parameter& p : module_.parameters())
    FURNACE_CHECK(p.value->device() == src)
        << "module must have its parameters and buffers on device " << src.str()
        << " (device_ids[0]) but found one of them on device: " << p.value->device().str();
}

Tensor DataParallel::forward(OpContext& ctx, const Tensor& input) {
  replicas_.clear();
  if (device_ids_.empty()) {  // no device: the module runs as it is
    shortcut_ = true;
    last_chunks_ = {input.dim() > 0 ? input.size(0) : 1};
    return module_.forward(ctx, input);
  }
  check_placement();
  forward_autocast_ = ctx.autocast;
  OpContext src{rt_, device_ids_[0], ctx.stream, ctx.autocast};
  timeline_.begin();
  std::vector<Tensor> inputs = parallel::scatter(src, input, device_ids_);
  timeline_.end(DpPhase::scatter, "scatter");
  last_chunks_.clear();
  for (const Tensor& t : inputs) last_chunks_.push_back(t.size(0));

  if (device_ids_.size() == 1) {  // the single-device shortcut: no replicate, no gather
    shortcut_ = true;
    timeline_.begin();
    Tensor out = module_.forward(src, inputs[0]);
    timeline_.end(DpPhase::compute, "forward");
    return out;
  }
  shortcut_ = false;
  used_devices_.assign(device_ids_.begin(),
                       device_ids_.begin() + static_cast<std::ptrdiff_t>(inputs.size()));
  timeline_.begin();
  replicas_ = parallel::replicate(src, module_, used_devices_);
  timeline_.end(DpPhase::replicate, "replicate");
  timeline_.begin();
  std::vector<Tensor> outputs =
      parallel::parallel_apply(rt_, replicas_, inputs, used_devices_, ctx.autocast, replica_threads(rt_));
  timeline_.end(DpPhase::compute, "forward");
  timeline_.begin();
  OpContext out_ctx{rt_, output_device_, ctx.stream};
  Tensor out = parallel::gather(out_ctx, outputs, Device::cuda(output_device_), &gathered_,
                                [this](const std::string& m) { warn_once(m); });
  timeline_.end(DpPhase::gather, "gather");
  return out;
}

void DataParallel::backward(OpContext& ctx, const Tensor& grad_output) {
  if (shortcut_) {
    if (device_ids_.empty()) {
      module_.backward(ctx, grad_output);
      return;
    }
    OpContext dev{rt_, device_ids_[0], ctx.stream};
    timeline_.begin();
    module_.backward(dev, grad_output);
    timeline_.end(DpPhase::compute, "backward");
    return;
  }
  FURNACE_CHECK(!replicas_.empty()) << "DataParallel.backward without a forward";
  timeline_.begin();
  OpContext out_ctx{rt_, output_device_, ctx.stream};
  std::vector<Tensor> grads = parallel::gather_backward(out_ctx, grad_output, gathered_);
  timeline_.end(DpPhase::gather, "gather_backward");
  // The autograd engine runs each device's part of the backward on a thread of its own. Each
  // worker also flattens its replica's gradients into the reduce's buckets (a cat kernel on its
  // own device, which the GPU runs right after that device's backward), so the CPU does those
  // copies in parallel; in the breakdown they count as compute.
  //
  // On the simulator, in fp32, the replicas hand their weight GEMMs' operands over instead, and
  // each layer's sum is built from them in reduce-add's order afterwards (WeightGradChain: the
  // same bits, without a gradient per replica to write and read back).
  const bool chained = chain_weight_grads();
  timeline_.begin();
  std::vector<std::vector<parallel::FlatBucket>> coalesced(used_devices_.size());
  parallel::parallel_apply(used_devices_, [&](size_t i) {
    OpContext dev{rt_, used_devices_[i], ctx.stream};
    replicas_[i]->set_weight_grad_sink(chained ? &weight_grads_->sink(i) : nullptr);
    replicas_[i]->backward(dev, grads[i]);
    coalesced[i] = parallel::coalesce_replica_grads(dev, *replicas_[i], /*weights_written=*/!chained);
    if (chained) weight_grads_->help();
  }, replica_threads(rt_));
  if (chained) weight_grads_->sum(replica_threads(rt_));
  timeline_.end(DpPhase::compute, "backward");
  timeline_.begin();
  OpContext src{rt_, device_ids_[0], ctx.stream};
  std::function<void(size_t, Tensor&)> presummed;
  if (chained) presummed = [this](size_t layer, Tensor& out) { weight_grads_->write_sum(layer, out); };
  parallel::replicate_backward(src, module_, replicas_, &coalesced, presummed);
  timeline_.end(DpPhase::reduce, "reduce");
  replicas_.clear();  // the replicas, their broadcast buffers and their gradients are freed here
}

}  // namespace furnace
