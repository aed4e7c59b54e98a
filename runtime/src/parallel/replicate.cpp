// parallel/replicate: one copy of the module per device, its parameters broadcast from
// device_ids[0] (Broadcast.forward), and the backward partner that sums the replicas' gradients
// back onto device_ids[0] (Broadcast.backward = ReduceAddCoalesced). torch/nn/parallel/replicate.py
// and _functions.py. Not here: buffers (the MLP has none), ScriptModules.
#include "furnace/error.h"     // defines: FURNACE_CHECK
#include "furnace/parallel.h"  // defines: replicate, replicate_backward
#include "parallel/comm.h"     // defines: broadcast_coalesced, reduce_add_coalesced

namespace furnace::parallel {
namespace {

std::vector<Tensor> values_of(MLP& m) {
  std::vector<Tensor> out;
  for (const Parameter& p : m.parameters()) out.push_back(*p.value);
  return out;
}

std::vector<Tensor> grads_of(MLP& replica) {
  std::vector<Tensor> g;
  for (const Parameter& p : replica.parameters()) {
    FURNACE_CHECK(p.grad->defined())
        << "replicate_backward: replica on cuda:" << replica.device() << " has no gradient for "
        << p.name << " (run its backward first)";
    g.push_back(*p.grad);
  }
  return g;
}

}  // namespace

std::vector<std::unique_ptr<MLP>> replicate(OpContext& ctx, MLP& module,
                                            const std::vector<int>& devices) {
  FURNACE_CHECK(!devices.empty()) << "replicate: expected at least one device";
  // Broadcast runs on every forward: fresh flat buffers each time, so the replicas always see the
  // module's current parameters.
  const std::vector<std::vector<Tensor>> copies =
      broadcast_coalesced(ctx, values_of(module), devices, kBufferSize);
  std::vector<std::unique_ptr<MLP>> replicas;
  for (size_t d = 0; d < devices.size(); ++d) {
    // A shell with no memory of its own (_replicate_for_data_parallel is a shallow copy); its
    // parameters become the broadcast tensors: the module's own for devices[0], views into the
    // flat buffers elsewhere.
    auto replica = std::make_unique<MLP>(ctx.rt, devices[d], module.sizes(), /*allocate=*/false);
    std::vector<Parameter> params = replica->parameters();
    for (size_t j = 0; j < params.size(); ++j) *params[j].value = copies[d][j];
    replicas.push_back(std::move(replica));
  }
  return replicas;
}

std::vector<FlatBucket> coalesce_replica_grads(OpContext& ctx, MLP& replica, bool weights_written) {
  return coalesce_for_reduce(ctx, grads_of(replica), kBufferSize, weights_written);
}

void replicate_backward(OpContext& ctx, MLP& module, std::vector<std::unique_ptr<MLP>>& replicas,
                        const std::vector<std::vector<FlatBucket>>* coalesced,
                        const std::function<void(size_t layer, Tensor& out)>& presummed_weight) {
  FURNACE_CHECK(!replicas.empty()) << "replicate_backward: no replicas";
  std::vector<std::vector<FlatBucket>> flats;
  if (coalesced) {
    FURNACE_CHECK(coalesced->size() == replicas.size())
        << "replicate_backward: one list per replica";
    flats = *coalesced;
  } else {
    for (auto& replica : replicas) {
      OpContext dev{ctx.rt, replica->device(), ctx.stream};
      flats.push_back(coalesce_replica_grads(dev, *replica));
    }
  }
  const int destination = module.device();
  // parameters() lists each layer's weight, then its bias.
  PresummedFn presummed;
  if (presummed_weight)
    presummed = [&](size_t i, Tensor& out) {
      if (i % 2 != 0) return false;
      presummed_weight(i / 2, out);
      return true;
    };
  const std::vector<Tensor> sums =
      reduce_add_flattened(ctx, flats, grads_of(*replicas[0]), destination, kBufferSize, presummed);
  // AccumulateGrad on the module's (leaf) parameters: with .grad None the reduced tensor becomes
  // .grad (a view into the reduced buffer: PyTorch steals it too); otherwise .grad += it.
  std::vector<Parameter> params = module.parameters();
  OpContext on_dest{ctx.rt, destination, ctx.stream};
  for (size_t j = 0; j < params.size(); ++j) {
    if (!params[j].grad->defined())
      *params[j].grad = sums[j];
    else
      ops::add(on_dest, *params[j].grad, *params[j].grad, sums[j]);
  }
}

}  // namespace furnace::parallel
