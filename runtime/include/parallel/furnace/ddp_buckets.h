// furnace/ddp_buckets.h: how DistributedDataParallel groups gradients into buckets, each
// all-reduced as one flat buffer (shared/reference/semantics.md section 7; PyTorch 1.13
// distributed.py and reducer.cpp's compute_bucket_assignment_by_size, every figure checked with
// PyTorch 1.13 on the CPU):
//   - iteration 1: one bucket holding every parameter (the constructor's limit is sys.maxsize),
//     all-reduced once after the whole backward: nothing overlaps;
//   - from the next forward on: buckets rebuilt over the order in which the gradients became ready
//     in that first backward, with limits [first_bucket_bytes, cap, cap, ...]: append a parameter,
//     and when the bucket reaches or passes its limit close it and take the next limit. A parameter
//     is never split, so a bucket can pass its limit. Buckets are all-reduced in that order, the
//     first-ready (the last layer) first.
// Every parameter here is f32 on one device (PyTorch also keys buckets by dtype and device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace furnace {

// dist._DEFAULT_FIRST_BUCKET_BYTES.
constexpr size_t kDdpFirstBucketBytes = 1u << 20;

// DDP's bucket_bytes_cap: int(bucket_cap_mb * 1024 * 1024); 25 MB by default. Throws
// furnace::Error for a cap that is not positive or not finite (DDP itself accepts them and builds
// nonsense buckets).
size_t ddp_bucket_cap_bytes(double bucket_cap_mb = 25.0);

// Parameters by index into model.parameters(); each bucket a list of them in all-reduce order.
using DdpBuckets = std::vector<std::vector<size_t>>;

// Iteration 1: every parameter in one bucket, in reverse parameter order.
DdpBuckets ddp_initial_buckets(size_t parameter_count);

// The rebuild: `ready_order` (parameter indices in the order their gradients became ready) cut
// into buckets by `bytes` (each parameter's gradient size) with limits [first, cap, cap, ...].
DdpBuckets ddp_rebuilt_buckets(const std::vector<size_t>& ready_order, const std::vector<size_t>& bytes,
                               size_t cap_bytes, size_t first_bytes = kDdpFirstBucketBytes);

// The order in which an MLP's gradients become ready (its parameters are each Linear's weight then
// bias, first layer first): the last layer first, and in each layer the bias before the weight,
// which is the reverse of the parameter order.
std::vector<size_t> mlp_gradient_ready_order(size_t parameter_count);

}  // namespace furnace
