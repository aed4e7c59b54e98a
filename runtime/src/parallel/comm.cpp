// parallel/comm: coalesced broadcast and reduce-add between devices, torch.cuda.comm's non-NCCL
// path. Every copy between devices goes through ops::copy_ (a peer copy); every sum is ops::add on
// the destination, so the sim backend models each of them on the devices' clocks. Where the backend
// has collectives (NCCL on cuda), broadcast and reduce_add use them instead, as PyTorch does when
// torch.cuda.nccl is available.
#include "parallel/comm.h"

#include <sched.h>  // defines: sched_getaffinity

#include <algorithm>
#include <string>
#include <thread>

#include "furnace/error.h"     // defines: FURNACE_CHECK
#include "furnace/op_table.h"  // defines: cpu_op_table
#include "parallel/worker_pool.h"  // defines: WorkerPool

namespace furnace::parallel {
namespace {

std::string sizes_text(const Shape& s) {  // 'x'.join(sizes), as comm.reduce_add writes them
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out;
}

OpContext on(OpContext& ctx, int device) { return OpContext{ctx.rt, device, ctx.stream}; }

// Below this many elements a host sum is not worth handing to other threads.
constexpr int64_t kMinRangeToSplit = int64_t{1} << 16;

}  // namespace

size_t host_cores() {
  static const size_t cores = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<size_t>(std::max(1, CPU_COUNT(&set)));
    return static_cast<size_t>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return cores;
}

namespace {

// torch.cat of `parts` into `flat` as the simulator runs it when the flat buffer is only ever the
// source of elided copies: the kernel modelled (clock, trace), the bytes not moved.
void cat_flat_modelled(OpContext& ctx, Tensor& flat, const std::vector<Tensor>& parts) {
  int64_t n = 0;
  for (const Tensor& p : parts) {
    FURNACE_CHECK(p.device() == flat.device() && p.dtype() == flat.dtype())
        << "cat: every part must be a " << dtype_name(flat.dtype()) << " tensor on " << flat.device().str();
    n += p.numel();
  }
  FURNACE_CHECK(n == flat.numel()) << "cat: " << n << " elements into a buffer of " << flat.numel();
  ctx.rt.backend().account_kernel(ctx.device, ctx.stream, "cat",
                                  KernelCost{0.0, 2.0 * static_cast<double>(flat.nbytes()), DType::f32});
}

}  // namespace

void add_n_bytes(Tensor& out, const std::vector<Tensor>& terms) {
  FURNACE_CHECK(!terms.empty() && out.dtype() == DType::f32) << "add_n_bytes: f32 terms expected";
  std::vector<const float*> ptrs;
  for (const Tensor& t : terms) {
    FURNACE_CHECK(t.dtype() == DType::f32 && t.numel() == out.numel())
        << "add_n_bytes: every term must be f32 with " << out.numel() << " elements";
    ptrs.push_back(t.data<float>());
  }
  // Host memory (the simulator's devices), summed by the host's kernels and modelled nowhere.
  // A large sum is split into ranges over the CPU's cores (DataParallel's reduce-add of the
  // weight gradients is the one serial pass of its step): each element is still the same terms
  // added in the same order, so the bits do not depend on the split. A single term is a copy,
  // made inside the replicas' own workers (coalescing), which the pool is busy running.
  const int64_t n = out.numel();
  const size_t parts = terms.size() < 2 ? 1 : std::min<size_t>(host_cores(), static_cast<size_t>(n / kMinRangeToSplit));
  float* dst = out.data<float>();
  const size_t terms_count = ptrs.size();
  auto range_begin = [&](size_t part) { return n * static_cast<int64_t>(part) / static_cast<int64_t>(parts); };
  std::vector<const float*> shifted(parts * terms_count);  // part p's terms at p * terms_count
  for (size_t p = 0; p < parts; ++p)
    for (size_t t = 0; t < terms_count; ++t) shifted[p * terms_count + t] = ptrs[t] + range_begin(p);
  auto add_range = [&](size_t part) {
    const int64_t begin = range_begin(part);
    cpu_op_table().add_n(DeviceStream{-1, 0}, dst + begin, shifted.data() + part * terms_count,
                         static_cast<int>(terms_count), range_begin(part + 1) - begin);
  };
  if (parts >= 2 && WorkerPool::shared().try_run(parts, add_range)) return;
  cpu_op_table().add_n(DeviceStream{-1, 0}, dst, ptrs.data(), static_cast<int>(ptrs.size()), n);
}

Tensor add_across_devices(OpContext& ctx, const std::vector<Tensor>& terms, bool move_bytes) {
  const char* op = "add";
  FURNACE_CHECK(terms.size() >= 2) << "add_across_devices: needs at least two terms";
  FURNACE_CHECK(ctx.device >= 0 && terms[0].device() == Device::cuda(ctx.device))
      << op << ": expected input on cuda:" << ctx.device << " but found it on " << terms[0].device().str();
  for (const Tensor& t : terms) {
    FURNACE_CHECK(t.defined() && t.device().is_cuda() && t.dtype() == DType::f32)
        << op << ": every term must be an f32 tensor on a device";
    FURNACE_CHECK(t.shape() == terms[0].shape())
        << "The size of tensor a " << shape_str(terms[0].shape()) << " must match the size of tensor b "
        << shape_str(t.shape());
  }
  const Device here = Device::cuda(ctx.device);
  const size_t bytes = terms[0].nbytes();
  Backend& backend = ctx.rt.backend();
  Tensor result;
  bool in_place = backend.host_accessible();
  FURNACE_ASSERT(move_bytes || in_place) << "add_across_devices without bytes on a device backend";
  for (size_t i = 1; i < terms.size(); ++i) {
    Tensor moved = Tensor::empty(ctx.rt, here, terms[i].shape());  // other.to(device), freed below
    const int from = terms[i].device().index;
    if (in_place) {
      const bool modelled = backend.model_copy(from == ctx.device ? CopyKind::d2d : CopyKind::peer,
                                               ctx.device, from, bytes, ctx.stream, false);
      FURNACE_ASSERT(modelled || (i == 1 && move_bytes))
          << "add_across_devices: the backend stopped modelling copies";
      in_place = modelled;
    }
    if (!result.defined()) result = Tensor::empty(ctx.rt, here, terms[0].shape());
    if (in_place) {  // modelled: the add kernel PyTorch launches; the sum itself comes after the loop
      const double n = static_cast<double>(result.numel());
      backend.account_kernel(ctx.device, ctx.stream, op, KernelCost{n, 3.0 * sizeof(float) * n, DType::f32});
    } else {
      ops::copy_(ctx, moved, terms[i]);
      ops::add(ctx, result, i == 1 ? terms[0] : result, moved);
    }
  }
  if (in_place && move_bytes) add_n_bytes(result, terms);
  return result;
}

std::vector<std::vector<size_t>> buckets_closing_at_limit(const std::vector<Tensor>& tensors,
                                                          size_t limit) {
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> bucket;
  size_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    bucket.push_back(i);
    bytes += tensors[i].nbytes();
    if (bytes >= limit) {
      out.push_back(std::move(bucket));
      bucket.clear();
      bytes = 0;
    }
  }
  if (!bucket.empty()) out.push_back(std::move(bucket));
  return out;
}

std::vector<std::vector<size_t>> buckets_within_limit(const std::vector<Tensor>& tensors,
                                                      size_t limit) {
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> bucket;
  size_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t size = tensors[i].nbytes();
    if (bytes + size > limit && bytes > 0) {
      out.push_back(std::move(bucket));
      bucket.clear();
      bytes = 0;
    }
    bucket.push_back(i);
    bytes += size;
  }
  if (!bucket.empty()) out.push_back(std::move(bucket));
  return out;
}

Tensor flatten_dense_tensors(OpContext& ctx, const std::vector<Tensor>& tensors, bool move_bytes) {
  FURNACE_ASSERT(!tensors.empty()) << "flatten_dense_tensors of nothing";
  if (tensors.size() == 1) return tensors[0].reshape({tensors[0].numel()});  // a view
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.numel();
  Tensor flat = Tensor::empty(ctx.rt, Device::cuda(ctx.device), {n}, tensors[0].dtype());
  if (move_bytes)
    ops::cat_flat(ctx, flat, tensors);
  else
    cat_flat_modelled(ctx, flat, tensors);
  return flat;
}

std::vector<Tensor> unflatten_dense_tensors(const Tensor& flat, const std::vector<Tensor>& like) {
  std::vector<Tensor> out;
  out.reserve(like.size());
  int64_t offset = 0;
  for (const Tensor& t : like) {
    out.push_back(flat.narrow(0, offset, t.numel()).reshape(t.shape()));
    offset += t.numel();
  }
  FURNACE_ASSERT(offset == flat.numel())
      << "unflatten: " << offset << " of " << flat.numel() << " elements";
  return out;
}

std::vector<std::vector<Tensor>> broadcast_coalesced(OpContext& ctx,
                                                     const std::vector<Tensor>& tensors,
                                                     const std::vector<int>& devices,
                                                     size_t buffer_size) {
  FURNACE_CHECK(!devices.empty()) << "Expected at least one device to broadcast to";
  for (const Tensor& t : tensors)
    FURNACE_CHECK(t.device() == Device::cuda(devices[0]))
        << "All tensors must be on devices[0]: " << devices[0];
  std::vector<std::vector<Tensor>> outputs(devices.size());
  outputs[0] = tensors;  // the source device gets the originals, not copies
  if (tensors.empty()) return outputs;
  OpContext src = on(ctx, devices[0]);
  Backend& backend = ctx.rt.backend();
  const bool collective = backend.collectives_available(devices, tensors[0].dtype());
  // The simulator models every copy (clock, trace, the destination buffer in the device's
  // allocator) but moves no bytes: each device's views read the module's own parameters, equal
  // to a copy by construction, since replicas never write their parameters and the optimizer
  // writes the module's only after the step's backward. The flat source buffer is then never
  // read, so its cat is modelled too. A real device copies.
  const bool elide = backend.host_accessible();
  for (const std::vector<size_t>& bucket : buckets_closing_at_limit(tensors, buffer_size)) {
    std::vector<Tensor> parts;
    for (size_t i : bucket) parts.push_back(tensors[i]);
    const Tensor flat = flatten_dense_tensors(src, parts, /*move_bytes=*/!elide);
    if (collective) {  // comm.broadcast with NCCL: one grouped broadcast of the flat buffer
      std::vector<Tensor> copies(devices.size());
      std::vector<void*> buffers{flat.raw()};
      for (size_t d = 1; d < devices.size(); ++d) {
        copies[d] = Tensor::empty(ctx.rt, Device::cuda(devices[d]), flat.shape(), flat.dtype());
        buffers.push_back(copies[d].raw());
      }
      const bool done = backend.broadcast(buffers, devices, 0, static_cast<size_t>(flat.numel()),
                                          flat.dtype(), ctx.stream);
      FURNACE_ASSERT(done) << "broadcast_coalesced: the backend's broadcast refused its devices";
      for (size_t d = 1; d < devices.size(); ++d)
        for (Tensor& v : unflatten_dense_tensors(copies[d], parts)) outputs[d].push_back(std::move(v));
      continue;
    }
    for (size_t d = 1; d < devices.size(); ++d) {
      // comm.broadcast without NCCL: out.copy_(flat, non_blocking=True) for each device, in order.
      Tensor copy = Tensor::empty(ctx.rt, Device::cuda(devices[d]), flat.shape(), flat.dtype());
      if (elide) {
        const bool modelled = backend.model_copy(CopyKind::peer, devices[d], devices[0],
                                                 flat.nbytes(), src.stream, false);
        FURNACE_ASSERT(modelled) << "broadcast_coalesced: a host-accessible backend must model copies";
        for (const Tensor& p : parts) outputs[d].push_back(Tensor::alias(p, Device::cuda(devices[d]), copy));
      } else {
        ops::copy_(src, copy, flat);
        for (Tensor& v : unflatten_dense_tensors(copy, parts)) outputs[d].push_back(std::move(v));
      }
    }
  }
  return outputs;
}

namespace {

// The bytes of a modelled cat (FlatBucket::written false), for a reduce that reads the flat buffer
// itself: each part copied into its place, nothing modelled (the cat already was).
void write_flat(FlatBucket& bucket) {
  std::vector<Tensor> views = unflatten_dense_tensors(bucket.flat, bucket.parts);
  for (size_t j = 0; j < views.size(); ++j) add_n_bytes(views[j], {bucket.parts[j]});
  bucket.written = true;
}

// comm.reduce_add; move_bytes = false on the simulator: every copy and add modelled, the result
// allocated but left for the caller to fill (the inputs' bytes are not where they claim to be).
Tensor reduce_add_impl(OpContext& ctx, const std::vector<Tensor>& inputs, int destination,
                       bool move_bytes) {
  FURNACE_CHECK(!inputs.empty()) << "reduce_add expects at least one input";
  int root = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    FURNACE_CHECK(inputs[i].device().is_cuda()) << "reduce_add expects all inputs to be on GPUs";
    if (inputs[i].device().index == destination) root = static_cast<int>(i);
    FURNACE_CHECK(inputs[i].shape() == inputs[0].shape())
        << "input " << i << " has invalid size: got " << sizes_text(inputs[i].shape())
        << ", but expected " << sizes_text(inputs[0].shape());
  }
  FURNACE_CHECK(root >= 0)
      << "reduce_add expects destination to be on the same GPU with one of the tensors";
  if (inputs.size() == 1) return inputs[0];
  // With NCCL (distinct devices): result = torch.empty_like(root); nccl.reduce(inputs, result).
  std::vector<int> devices;
  for (const Tensor& t : inputs) devices.push_back(t.device().index);
  Backend& backend = ctx.rt.backend();
  if (backend.collectives_available(devices, inputs[0].dtype())) {
    Tensor result = Tensor::empty(ctx.rt, Device::cuda(destination), inputs[0].shape(), inputs[0].dtype());
    std::vector<const void*> buffers;
    for (const Tensor& t : inputs) buffers.push_back(t.raw());
    const bool done = backend.reduce_sum(result.raw(), buffers, devices, root,
                                         static_cast<size_t>(result.numel()), result.dtype(), ctx.stream);
    FURNACE_ASSERT(done) << "reduce_add: the backend's reduce refused its devices";
    return result;
  }
  // result = root + other[0].to(destination); result.add_(other[i].to(destination)) for the rest.
  std::vector<Tensor> terms{inputs[static_cast<size_t>(root)]};
  for (size_t i = 0; i < inputs.size(); ++i)
    if (static_cast<int>(i) != root) terms.push_back(inputs[i]);
  OpContext dst = on(ctx, destination);
  return add_across_devices(dst, terms, move_bytes);
}

}  // namespace

Tensor reduce_add(OpContext& ctx, const std::vector<Tensor>& inputs, int destination) {
  return reduce_add_impl(ctx, inputs, destination, /*move_bytes=*/true);
}

std::vector<size_t> reduce_add_order(const std::vector<Tensor>& inputs, int destination) {
  std::vector<size_t> order;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].device().index == destination) order.push_back(i);
  FURNACE_CHECK(order.size() == 1)
      << "reduce_add expects destination to be on the same GPU with one of the tensors";
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].device().index != destination) order.push_back(i);
  return order;
}

std::vector<FlatBucket> coalesce_for_reduce(OpContext& ctx, const std::vector<Tensor>& tensors,
                                            size_t buffer_size, bool parts_written) {
  // The simulator models each cat but moves no bytes: the reduce reads the parts themselves
  // (reduce_add_flattened), which saves a copy of every gradient per replica on the CPU.
  const bool elide = ctx.rt.backend().host_accessible();
  FURNACE_ASSERT(parts_written || elide) << "coalesce_for_reduce: unwritten parts on a device backend";
  std::vector<FlatBucket> flats;
  for (const std::vector<size_t>& bucket : buckets_within_limit(tensors, buffer_size)) {
    std::vector<Tensor> parts;
    for (size_t i : bucket) {
      FURNACE_CHECK(tensors[i].device() == Device::cuda(ctx.device))
          << "reduce_add_coalesced: a tensor of cuda:" << ctx.device << "'s list is on "
          << tensors[i].device().str();
      parts.push_back(tensors[i]);
    }
    // A single tensor is flattened as a view (no cat): its bytes are in place either way.
    const bool written = parts_written && (!elide || parts.size() == 1);
    Tensor flat = flatten_dense_tensors(ctx, parts, /*move_bytes=*/!elide);
    flats.push_back(FlatBucket{std::move(flat), std::move(parts), written});
  }
  return flats;
}

std::vector<Tensor> reduce_add_flattened(OpContext& ctx,
                                         const std::vector<std::vector<FlatBucket>>& flats,
                                         const std::vector<Tensor>& like, int destination,
                                         size_t buffer_size, const PresummedFn& presummed) {
  FURNACE_CHECK(!flats.empty()) << "reduce_add_coalesced expects inputs from at least one device";
  const std::vector<std::vector<size_t>> buckets = buckets_within_limit(like, buffer_size);
  std::vector<Tensor> output(like.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    std::vector<FlatBucket> per_device;
    std::vector<Tensor> inputs, parts;
    std::vector<int> devices;
    bool written = true;
    for (const auto& f : flats) {
      FURNACE_CHECK(f.size() == buckets.size())
          << "reduce_add_coalesced: every device must give " << like.size() << " tensors";
      per_device.push_back(f[b]);
      inputs.push_back(f[b].flat);
      devices.push_back(f[b].flat.device().index);
      written = written && f[b].written;
    }
    for (size_t i : buckets[b]) parts.push_back(like[i]);
    // A reduce that reads the flat buffers themselves (a single input is returned as it is; a
    // collective reads device memory) needs their bytes.
    if (!written && (inputs.size() == 1 ||
                     ctx.rt.backend().collectives_available(devices, inputs[0].dtype()))) {
      FURNACE_ASSERT(!presummed) << "reduce_add_coalesced: presummed parts in a whole-buffer reduce";
      for (FlatBucket& f : per_device)
        if (!f.written) write_flat(f);
      written = true;
    }
    const Tensor sum = reduce_add_impl(ctx, inputs, destination, written);
    std::vector<Tensor> views = unflatten_dense_tensors(sum, parts);
    if (!written) {  // each part summed from where it lives, in reduce_add's order of terms
      const std::vector<size_t> order = reduce_add_order(inputs, destination);
      for (size_t j = 0; j < views.size(); ++j) {
        if (presummed && presummed(buckets[b][j], views[j])) continue;
        std::vector<Tensor> terms;
        for (size_t d : order) {
          FURNACE_CHECK(per_device[d].parts.size() == views.size())
              << "reduce_add_coalesced: a device's bucket " << b << " has "
              << per_device[d].parts.size() << " tensors, expected " << views.size();
          terms.push_back(per_device[d].parts[j]);
        }
        add_n_bytes(views[j], terms);
      }
    }
    for (size_t j = 0; j < buckets[b].size(); ++j) output[buckets[b][j]] = views[j];
  }
  return output;
}

std::vector<Tensor> reduce_add_coalesced(OpContext& ctx,
                                         const std::vector<std::vector<Tensor>>& inputs,
                                         int destination, size_t buffer_size) {
  FURNACE_CHECK(!inputs.empty()) << "reduce_add_coalesced expects inputs from at least one device";
  std::vector<std::vector<FlatBucket>> flats;
  for (const auto& per_device : inputs) {
    FURNACE_CHECK(per_device.size() == inputs[0].size())
        << "reduce_add_coalesced: every device must give " << inputs[0].size() << " tensors";
    FURNACE_CHECK(!per_device.empty() && per_device[0].device().is_cuda())
        << "reduce_add expects all inputs to be on GPUs";
    OpContext dev = on(ctx, per_device[0].device().index);
    flats.push_back(coalesce_for_reduce(dev, per_device, buffer_size));
  }
  return reduce_add_flattened(ctx, flats, inputs[0], destination, buffer_size);
}

}  // namespace furnace::parallel
