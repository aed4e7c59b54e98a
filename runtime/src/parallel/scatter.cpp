// parallel/scatter: torch.chunk's sizes and Scatter (forward: split a batch across devices;
// backward: gather the chunks' gradients back where the batch was). torch/nn/parallel/_functions.py
// Scatter, torch/csrc/cuda/comm.cpp scatter, ATen's chunk (TensorShape.cpp).
// Not here: containers and kwargs (the reference MLP takes one tensor).
#include <algorithm>
#include <string>

#include "furnace/error.h"     // defines: FURNACE_CHECK
#include "furnace/parallel.h"  // defines: scatter, scatter_backward, chunk_sizes, gather

namespace furnace::parallel {

std::vector<int64_t> chunk_sizes(int64_t n, int k) {
  FURNACE_CHECK(k > 0) << "chunk expects `chunks` to be greater than 0, got: " << k;
  FURNACE_CHECK(n >= 0) << "chunk: negative size " << n;
  if (n == 0) return std::vector<int64_t>(static_cast<size_t>(k), 0);  // k empty pieces
  // Arithmetic only (no n + k - 1, no start += split past n): any n up to INT64_MAX.
  const int64_t split = n / k + (n % k != 0);              // ceil(n / k)
  const int64_t count = n / split + (n % split != 0);      // ceil(n / split) <= k
  std::vector<int64_t> out(static_cast<size_t>(count), split);
  out.back() = n - split * (count - 1);
  return out;
}

std::vector<std::string> explain_chunks(int64_t n, const std::vector<int>& device_ids) {
  const int k = static_cast<int>(device_ids.size());
  if (k == 0) return {"no device: DataParallel runs the module as it is, on the whole batch"};
  const std::vector<int64_t> sizes = chunk_sizes(n, k);
  const int used = static_cast<int>(sizes.size());
  const std::string per = std::to_string(sizes[0]);
  std::string list;
  for (int64_t s : sizes) list += (list.empty() ? "" : ",") + std::to_string(s);
  std::vector<std::string> notes;
  if (k == 1) {
    notes.push_back(
        "one device: DataParallel's single-device shortcut runs the module there "
        "directly (no replicate, no gather); the batch of " +
        std::to_string(n) + " rows is only copied to cuda:" + std::to_string(device_ids[0]));
    return notes;
  }
  auto rows = [](int64_t r) { return std::to_string(r) + (r == 1 ? " row" : " rows"); };
  const std::string rule = "torch.chunk: ceil(" + std::to_string(n) + "/" + std::to_string(k) +
                           ") = " + rows(sizes[0]) + " per chunk";
  if (used == k && sizes.back() == sizes[0])
    notes.push_back("global batch " + std::to_string(n) + " = " + per + " per GPU x " +
                    std::to_string(k) + " GPUs (" + rule + ")");
  else
    notes.push_back("global batch " + std::to_string(n) + " splits " + list + " over " +
                    std::to_string(used) + " GPU" + (used == 1 ? "" : "s") + " (" + rule + ")");
  if (used < k) {
    std::string idle;
    for (int i = used; i < k; ++i)
      idle +=
          (idle.empty() ? "cuda:" : ", cuda:") + std::to_string(device_ids[static_cast<size_t>(i)]);
    notes.push_back((n < k ? "the batch of " + std::to_string(n) + " rows is smaller than the " +
                                 std::to_string(k) + " devices"
                           : "ceil(" + std::to_string(n) + "/" + per +
                                 ") = " + std::to_string(used) + " chunks") +
                    ": only " + std::to_string(used) + " replica" + (used == 1 ? "" : "s") +
                    " run; " + idle + (k - used == 1 ? " gets nothing and idles" : " get nothing and idle"));
  } else if (sizes.back() != sizes[0]) {
    notes.push_back("the last chunk has " + rows(sizes.back()) + ", not " + per +
                    ": a loss averaged inside each replica would weight each of its rows " + per +
                    "/" + std::to_string(sizes.back()) +
                    " times as much as the others' (see furnace dp-loss-trap)");
  }
  notes.push_back("--batch is the global batch: global batch = per-GPU batch x GPUs, so " +
                  rows(sizes[0]) + " per GPU on " + std::to_string(k) + " GPUs is --batch " +
                  std::to_string(static_cast<uint64_t>(sizes[0]) * static_cast<uint64_t>(k)));
  return notes;
}

std::vector<Tensor> scatter(OpContext& ctx, const Tensor& input, const std::vector<int>& devices,
                            const std::vector<int64_t>* sizes) {
  FURNACE_CHECK(input.defined() && input.dim() >= 1)
      << "scatter: expected a tensor with a batch dimension";
  FURNACE_CHECK(!devices.empty()) << "scatter: expected at least one device";
  const int64_t n = input.size(0);
  std::vector<int64_t> chunks = sizes ? *sizes : chunk_sizes(n, static_cast<int>(devices.size()));
  if (sizes) {
    int64_t total = 0;
    for (int64_t c : chunks) total += c;
    FURNACE_CHECK(chunks.size() == devices.size() && total == n)
        << "Expected chunk sizes to sum to " << n << " over " << devices.size() << " devices";
  }
  // torch.cuda.comm.scatter returns one chunk per piece torch.chunk made: fewer than the devices
  // when ceil(n / k) says so, and the last devices then get nothing.
  std::vector<Tensor> out;
  int64_t start = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Tensor piece = input.narrow(0, start, chunks[i]);
    start += chunks[i];
    const Device target = Device::cuda(devices[i]);
    if (input.device() == target) {  // already there: stays a view of the input, no copy
      out.push_back(piece);
      continue;
    }
    Tensor moved = Tensor::empty(ctx.rt, target, piece.shape(), piece.dtype());
    // A host batch is copied host-to-device on each device's stream (PyTorch: a background copy
    // stream per device, which the main stream then waits for); a device batch by peer copies.
    OpContext on_target{ctx.rt, devices[i], ctx.stream};
    ops::copy_(on_target, moved, piece);
    out.push_back(std::move(moved));
  }
  return out;
}

Tensor scatter_backward(OpContext& ctx, const std::vector<Tensor>& grads, Device input_device) {
  return gather(ctx, grads, input_device);
}

}  // namespace furnace::parallel
