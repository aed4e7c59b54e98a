// parallel/gather: Gather (forward: concatenate the replicas' outputs on one device; backward:
// scatter the output's gradient back in the same sizes). torch/nn/parallel/_functions.py Gather,
// torch/csrc/cuda/comm.cpp gather. Not here: dicts, namedtuples and None outputs.
#include <algorithm>

#include "furnace/error.h"     // defines: FURNACE_CHECK
#include "furnace/parallel.h"  // defines: gather, gather_backward, scatter

namespace furnace::parallel {

Tensor gather(OpContext& ctx, const std::vector<Tensor>& outputs, Device target,
              GatherRecord* record, const WarningHandler& warn) {
  FURNACE_CHECK(!outputs.empty()) << "gather: expected at least one tensor";
  bool all_scalars = true;
  for (const Tensor& t : outputs) {
    FURNACE_CHECK(t.defined() && t.device().is_cuda())
        << "Gather function not implemented for CPU tensors";
    all_scalars = all_scalars && t.dim() == 0;
  }
  std::vector<Tensor> inputs = outputs;
  if (all_scalars) {  // each 0-dim output is viewed as shape (1): the result is a vector
    for (Tensor& t : inputs) t = t.reshape({1});
    if (warn)
      warn(
          "Was asked to gather along dimension 0, but all input tensors were scalars; will instead "
          "unsqueeze and return a vector.");
  }
  const Shape& first = inputs[0].shape();
  int64_t rows = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape& s = inputs[i].shape();
    FURNACE_CHECK(s.size() == first.size())
        << "Expected all input tensors to have the same number of dimensions (" << first.size()
        << "), but tensor at index " << i << " has " << s.size() << " dimensions";
    FURNACE_CHECK(s.size() >= 1 && std::equal(s.begin() + 1, s.end(), first.begin() + 1))
        << "Input tensor at index " << i << " has invalid shape " << shape_str(s)
        << ", but expected " << shape_str(first) << " in every dimension but 0";
    FURNACE_CHECK(inputs[i].dtype() == inputs[0].dtype())
        << "gather: tensor at index " << i << " has dtype " << dtype_name(inputs[i].dtype());
    rows += s[0];
  }
  FURNACE_CHECK(!target.is_cuda() || (target.index >= 0 && target.index < ctx.rt.device_count()))
      << "CUDA error: invalid device ordinal (gather to " << target.str() << ", this process sees "
      << ctx.rt.device_count() << " device(s))";
  Shape shape = first;
  shape[0] = rows;
  Tensor result = Tensor::empty(ctx.rt, target, shape, inputs[0].dtype());
  if (record) *record = GatherRecord{};
  int64_t start = 0;
  for (const Tensor& t : inputs) {
    // result.narrow(dim, start, n).copy_(t, non_blocking): a peer copy from each replica's device
    // (a d2d copy for the output device's own piece, d2h for a host target).
    Tensor slot = result.narrow(0, start, t.size(0));
    OpContext on_source{ctx.rt, t.device().index, ctx.stream};
    ops::copy_(on_source, slot, t);
    start += t.size(0);
    if (record) {
      record->input_devices.push_back(t.device().index);
      record->input_sizes.push_back(t.size(0));
    }
  }
  if (record) record->unsqueezed_scalar = all_scalars;
  return result;
}

std::vector<Tensor> gather_backward(OpContext& ctx, const Tensor& grad_output,
                                    const GatherRecord& record) {
  std::vector<Tensor> grads = scatter(ctx, grad_output, record.input_devices, &record.input_sizes);
  if (record.unsqueezed_scalar)
    for (Tensor& g : grads) g = g.reshape({});  // g[0]: back to the replica's 0-dim output
  return grads;
}

}  // namespace furnace::parallel
