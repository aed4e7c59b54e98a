// parallel/ddp_buckets: DistributedDataParallel's bucket assignment (see the header).
#include "furnace/ddp_buckets.h"

#include <cmath>

#include "furnace/error.h"

namespace furnace {

size_t ddp_bucket_cap_bytes(double bucket_cap_mb) {
  FURNACE_CHECK(std::isfinite(bucket_cap_mb) && bucket_cap_mb > 0)
      << "bucket_cap_mb must be a positive number of megabytes, got " << bucket_cap_mb;
  const double bytes = std::floor(bucket_cap_mb * 1024.0 * 1024.0);  // int() of a positive float
  FURNACE_CHECK(bytes >= 1 && bytes < 9.0e18) << "bucket_cap_mb " << bucket_cap_mb << " gives a cap of "
                                              << bytes << " bytes";
  return static_cast<size_t>(bytes);
}

DdpBuckets ddp_initial_buckets(size_t parameter_count) {
  if (parameter_count == 0) return {};
  std::vector<size_t> all;
  for (size_t i = parameter_count; i-- > 0;) all.push_back(i);
  return {all};
}

DdpBuckets ddp_rebuilt_buckets(const std::vector<size_t>& ready_order, const std::vector<size_t>& bytes,
                               size_t cap_bytes, size_t first_bytes) {
  FURNACE_CHECK(cap_bytes > 0 && first_bytes > 0) << "DDP bucket limits must be positive";
  DdpBuckets out;
  std::vector<size_t> bucket;
  size_t size = 0, limit = first_bytes;
  for (size_t p : ready_order) {
    FURNACE_CHECK(p < bytes.size()) << "DDP buckets: parameter " << p << " of " << bytes.size();
    bucket.push_back(p);
    size += bytes[p];
    if (size >= limit) {
      out.push_back(std::move(bucket));
      bucket.clear();
      size = 0;
      limit = cap_bytes;  // the last limit repeats
    }
  }
  if (!bucket.empty()) out.push_back(std::move(bucket));
  return out;
}

std::vector<size_t> mlp_gradient_ready_order(size_t parameter_count) {
  std::vector<size_t> order;
  for (size_t i = parameter_count; i-- > 0;) order.push_back(i);
  return order;
}

}  // namespace furnace
