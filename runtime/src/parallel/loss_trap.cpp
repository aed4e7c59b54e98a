// parallel/loss_trap: DataParallel's loss-weighting trap, run both ways on one batch with the
// verbs themselves. Right: DataParallel returns the logits, the loss is taken on the gathered
// output (the batch mean). Trap: each replica returns its chunk's mean loss, gather turns the
// scalars into a vector (PyTorch's warning), and .mean() of it weights chunk i's rows by
// 1/(replicas * rows_i) instead of 1/B. Not here: the CLI's account of it (dp_loss_trap_command).
#include <cmath>

#include "furnace/error.h"     // defines: FURNACE_CHECK
#include "furnace/parallel.h"  // defines: run_loss_trap, the verbs
#include "furnace/random.h"    // defines: Generator

namespace furnace {
namespace {

std::vector<float> host_copy(Runtime& rt, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  OpContext ctx{rt, t.device().index, 0};
  ops::copy_to_host(ctx, v.data(), t);
  return v;
}

std::vector<float> all_grads(Runtime& rt, MLP& model) {
  std::vector<float> out;
  for (const Parameter& p : model.parameters()) {
    std::vector<float> g = host_copy(rt, *p.grad);
    out.insert(out.end(), g.begin(), g.end());
  }
  return out;
}

}  // namespace

LossTrapResult run_loss_trap(Runtime& rt, std::vector<int> device_ids, int64_t batch, uint64_t seed,
                             const WarningHandler& warn) {
  FURNACE_CHECK(batch >= 1) << "--batch must be at least 1 (got " << batch << ")";
  if (device_ids.empty())
    for (int d = 0; d < rt.device_count(); ++d) device_ids.push_back(d);
  FURNACE_CHECK(!device_ids.empty()) << "No CUDA GPUs are available";
  for (int d : device_ids)  // PyTorch's words, then what this process sees (as train and scatter say)
    FURNACE_CHECK(d >= 0 && d < rt.device_count())
        << "Invalid device id " << d << " (device_ids; " << rt.backend().describe_devices() << ")";
  LossTrapResult r;
  auto collect = [&](const std::string& m) {
    r.warnings.push_back(m);
    if (warn) warn(m);
  };
  const int src = device_ids[0];
  OpContext ctx{rt, src, 0};
  MLP model(rt, src, {784, 512, 512, 10});
  model.init_parameters(ctx, seed);
  Generator g(seed + 1);
  Tensor x = Tensor::empty_host({batch, 784});
  Tensor y = Tensor::empty_host({batch}, DType::i32);
  for (int64_t i = 0; i < batch * 784; ++i) x.data<float>()[i] = g.uniform(-1.0f, 1.0f);
  for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(g.below(10));

  // The right way: the loss on the gathered output, over the whole batch.
  DataParallel dp(rt, model, device_ids, std::nullopt, collect);
  Tensor logits = dp.forward(ctx, x);
  OpContext out_ctx{rt, logits.device().index, 0};
  Tensor y_out = Tensor::empty(rt, logits.device(), {batch}, DType::i32);
  ops::copy_(out_ctx, y_out, y);
  CrossEntropyLoss criterion;
  r.batch_mean = criterion.forward(out_ctx, logits, y_out);
  dp.backward(ctx, criterion.backward(out_ctx));
  const std::vector<float> g_batch = all_grads(rt, model);
  for (const Parameter& p : model.parameters()) *p.grad = Tensor();  // zero_grad(set_to_none)

  // The trap: the loss inside each replica's forward, a vector of chunk means, then .mean().
  std::vector<Tensor> xs = parallel::scatter(ctx, x, device_ids);
  std::vector<Tensor> ys = parallel::scatter(ctx, y, device_ids);
  r.devices.assign(device_ids.begin(), device_ids.begin() + static_cast<std::ptrdiff_t>(xs.size()));
  for (const Tensor& c : xs) r.chunks.push_back(c.size(0));
  if (device_ids.size() == 1) {
    // DataParallel.forward with one device id calls the module itself on the scattered input: the
    // loss comes back as the module returned it, 0-dim; nothing is gathered, nothing warned, and
    // .mean() of a 0-dim tensor is the tensor.
    r.scalar_loss = true;
    CrossEntropyLoss loss;
    const float l = loss.forward(ctx, model.forward(ctx, xs[0]), ys[0]);
    r.replica_losses = {l};
    r.mean_of_means = l;
    r.weighted_mean = l;
    model.backward(ctx, loss.backward(ctx, 1.0f));
  } else {
    auto replicas = parallel::replicate(ctx, model, r.devices);
    std::vector<CrossEntropyLoss> losses(replicas.size());
    std::vector<Tensor> scalars(replicas.size());
    parallel::parallel_apply(r.devices, [&](size_t i) {
      OpContext dev{rt, r.devices[i], 0};
      const float loss = losses[i].forward(dev, replicas[i]->forward(dev, xs[i]), ys[i]);
      scalars[i] = Tensor::empty(rt, Device::cuda(r.devices[i]), {});  // a 0-dim loss tensor
      ops::copy_to_device(dev, scalars[i], &loss);
    });
    parallel::GatherRecord record;
    Tensor vec = parallel::gather(ctx, scalars, Device::cuda(src), &record, collect);
    r.replica_losses = host_copy(rt, vec);
    // vec.mean() on a float32 CUDA tensor, as ATen computes it (ReduceMomentKernel.cu, MeanOps):
    // the float32 sum, in index order for a vector this short, times the float32 factor
    // float(1) / numel. Not a double mean: that differs in the last bit for some losses.
    const int64_t n = static_cast<int64_t>(r.replica_losses.size());
    const float factor = 1.0f / static_cast<float>(n);
    float sum = 0.0f;
    for (float l : r.replica_losses) sum += l;
    r.mean_of_means = sum * factor;
    for (size_t i = 0; i < r.replica_losses.size(); ++i)
      r.weighted_mean +=
          static_cast<double>(r.chunks[i]) * r.replica_losses[i] / static_cast<double>(batch);
    // .mean().backward(): d/dloss_i = factor, scattered back to each replica as a 0-dim gradient.
    Tensor dvec = Tensor::empty(rt, Device::cuda(src), vec.shape());
    const std::vector<float> grads(r.replica_losses.size(), factor);
    ops::copy_to_device(ctx, dvec, grads.data());
    std::vector<Tensor> dscalars = parallel::gather_backward(ctx, dvec, record);
    parallel::parallel_apply(r.devices, [&](size_t i) {
      OpContext dev{rt, r.devices[i], 0};
      float dloss = 0;
      ops::copy_to_host(dev, &dloss, dscalars[i]);
      replicas[i]->backward(dev, losses[i].backward(dev, dloss));
    });
    parallel::replicate_backward(ctx, model, replicas);
  }
  const std::vector<float> g_trap = all_grads(rt, model);

  double diff = 0, norm = 0;
  for (size_t i = 0; i < g_batch.size(); ++i) {
    diff += (static_cast<double>(g_trap[i]) - g_batch[i]) *
            (static_cast<double>(g_trap[i]) - g_batch[i]);
    norm += static_cast<double>(g_batch[i]) * g_batch[i];
  }
  r.grad_relative_difference = norm > 0 ? std::sqrt(diff / norm) : 0.0;
  return r;
}

}  // namespace furnace
