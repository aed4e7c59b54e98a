// parallel/comm: the collectives under DataParallel, as torch.cuda.comm does them without NCCL
// (torch/csrc/cuda/comm.cpp, torch/nn/parallel/comm.py): tensors are coalesced into flat buffers,
// copied between devices with plain peer copies (Backend::copy, CopyKind::peer, which the sim
// backend runs with ATen's two-way stream barrier) and added on the destination.
// Forward and backward partners: broadcast_coalesced (Broadcast.forward) is undone by
// reduce_add_coalesced (Broadcast.backward), and the other way round for double backward.
// Not here: NCCL and multi-process collectives (DistributedDataParallel).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "furnace/ops.h"       // defines: OpContext
#include "furnace/parallel.h"  // defines: kBufferSize
#include "furnace/tensor.h"    // defines: Tensor

namespace furnace::parallel {

// Bucketing, as a list of index lists into `tensors`. Two rules, because PyTorch has two:
// take_tensors (torch/csrc/utils/tensor_flatten.cpp, used by broadcast_coalesced) closes a bucket
// once it holds >= limit bytes, including the tensor that crossed the limit;
std::vector<std::vector<size_t>> buckets_closing_at_limit(const std::vector<Tensor>& tensors,
                                                          size_t limit);
// _take_tensors (torch/_utils.py, used by reduce_add_coalesced) starts a new bucket before a
// tensor that would take a non-empty one past limit bytes.
std::vector<std::vector<size_t>> buckets_within_limit(const std::vector<Tensor>& tensors,
                                                      size_t limit);

// _flatten_dense_tensors: one 1-D buffer on ctx.device holding `tensors` back to back (a cat
// kernel); a single tensor is flattened as a view, without a copy. move_bytes = false: the cat is
// allocated and modelled but not written (a buffer whose copies the simulator elides).
Tensor flatten_dense_tensors(OpContext& ctx, const std::vector<Tensor>& tensors,
                             bool move_bytes = true);
// _unflatten_dense_tensors: views into `flat` shaped like each of `like`.
std::vector<Tensor> unflatten_dense_tensors(const Tensor& flat, const std::vector<Tensor>& like);

// comm.broadcast_coalesced(tensors, devices, buffer_size). Every tensor must be on devices[0].
// Returns one list per device: [0] is `tensors` themselves; [i] are views into one flat buffer per
// bucket, copied from devices[0] to devices[i] (on the simulator: views on devices[i] that read
// `tensors` and hold that buffer, the copy modelled, not made).
std::vector<std::vector<Tensor>> broadcast_coalesced(OpContext& ctx,
                                                     const std::vector<Tensor>& tensors,
                                                     const std::vector<int>& devices,
                                                     size_t buffer_size = kBufferSize);

// comm.reduce_add's arithmetic without NCCL, onto ctx.device: returns
// ((terms[0] + terms[1]) + terms[2]) + ... (f32, one shape; terms[0] on ctx.device, the others on
// any device; at least two). Modelled as PyTorch runs it: each further term copied to ctx.device
// into a temporary (peer copy, freed after use), the first sum out of place, the rest add_ in
// place. On the simulator (host-accessible memory) those copies are modelled (clock, trace,
// allocator) without moving their bytes: the sum reads every term where it lives, in one pass,
// with the same roundings. move_bytes = false (simulator only): the copies and the adds are
// modelled and the result is allocated, but left unwritten; the caller fills it with add_n_bytes
// from where the bytes live.
Tensor add_across_devices(OpContext& ctx, const std::vector<Tensor>& terms, bool move_bytes = true);
// out = terms[0] + terms[1] + ... elementwise in that order (the roundings of add_across_devices),
// computed on the host and modelled nowhere: the bytes of adds already modelled by
// add_across_devices(..., move_bytes = false). Host-accessible (simulator) memory only.
void add_n_bytes(Tensor& out, const std::vector<Tensor>& terms);

// The CPUs this process may run on (its affinity mask at first use, which taskset and cgroups
// narrow).
size_t host_cores();

// comm.reduce_add(inputs, destination): the elementwise SUM of same-shape tensors, one per
// device, as a new tensor on `destination`, which must hold one of them (the root):
// root + copy(first other), then += copy(each further other), in input order.
Tensor reduce_add(OpContext& ctx, const std::vector<Tensor>& inputs, int destination);
// reduce_add's order of terms: the root (the input on `destination`) first, then the others in
// input order. Index into `inputs`.
std::vector<size_t> reduce_add_order(const std::vector<Tensor>& inputs, int destination);

// comm.reduce_add_coalesced(inputs, destination, buffer_size): inputs[d] are the same list of
// tensors on device d; each bucket is flattened on every device, reduce_add-ed onto
// `destination` and unflattened (views into the reduced buffer). Returns the sums in input order.
std::vector<Tensor> reduce_add_coalesced(OpContext& ctx,
                                         const std::vector<std::vector<Tensor>>& inputs,
                                         int destination, size_t buffer_size = kBufferSize);
// The same in two halves. First, on each device (safe to run for different devices on different
// threads: it touches only ctx.device): its tensors flattened bucket by bucket. On a
// host-accessible backend (the simulator) each cat is modelled, not made (FlatBucket::written).
// parts_written = false: some tensors' bytes are not written (their sums come from elsewhere,
// see reduce_add_flattened's presummed), so no bucket may be read as a whole.
std::vector<FlatBucket> coalesce_for_reduce(OpContext& ctx, const std::vector<Tensor>& tensors,
                                            size_t buffer_size = kBufferSize,
                                            bool parts_written = true);
// Then: bucket b of every device (flats[d][b]) reduce_add-ed onto `destination` and unflattened
// like `like` (the tensors of one device). Unwritten buckets are summed part by part from where
// their bytes live, with the roundings of the whole-buffer sum.
// presummed(i, out), when given, writes into `out` the sum of tensor i (an index into `like`) if
// it was summed elsewhere (parallel/weight_grad_chain) and says whether it did; the reduce then
// models that sum but does not compute it.
using PresummedFn = std::function<bool(size_t index, Tensor& out)>;
std::vector<Tensor> reduce_add_flattened(OpContext& ctx, const std::vector<std::vector<FlatBucket>>& flats,
                                         const std::vector<Tensor>& like, int destination,
                                         size_t buffer_size = kBufferSize,
                                         const PresummedFn& presummed = {});

}  // namespace furnace::parallel
