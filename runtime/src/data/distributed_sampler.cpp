// data/distributed_sampler: DistributedSampler and the randperm it shuffles with (see the header;
// torch/utils/data/distributed.py and aten's randperm_cpu).
#include "furnace/distributed_sampler.h"

#include <random>
#include <utility>

#include "furnace/error.h"

namespace furnace {

std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  FURNACE_CHECK(n >= 0) << "randperm: n must be non-negative, got " << n;
  std::mt19937 engine(static_cast<uint32_t>(seed));  // at::mt19937: init_genrand of the low 32 bits
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(engine() % static_cast<uint64_t>(n - i));
    std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(z + i)]);
  }
  return r;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : n_(dataset_size), options_(options) {
  const int world = options_.num_replicas;
  FURNACE_CHECK(world >= 1) << "DistributedSampler: num_replicas must be at least 1, got " << world;
  FURNACE_CHECK(options_.rank >= 0 && options_.rank < world)
      << "Invalid rank " << options_.rank << ", rank should be in the interval [0, " << world - 1 << "]";
  FURNACE_CHECK(n_ >= 0) << "DistributedSampler: a dataset of " << n_ << " samples";
  if (options_.drop_last && n_ % world != 0) {
    // math.ceil((N - world) / world): the largest multiple of world that fits, as whole rounds
    const int64_t d = n_ - world;
    num_samples_ = d <= 0 ? 0 : (d + world - 1) / world;
  } else {
    num_samples_ = (n_ + world - 1) / world;
  }
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (options_.shuffle) {
    all = torch_randperm(n_, options_.seed + static_cast<uint64_t>(epoch_));
  } else {
    all.resize(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) all[static_cast<size_t>(i)] = i;
  }
  const size_t total = static_cast<size_t>(total_size());
  if (!options_.drop_last) {
    // indices += indices[:padding], or the whole list repeated when padding exceeds it
    const size_t original = all.size();
    for (size_t i = 0; all.size() < total && original > 0; ++i) all.push_back(all[i % original]);
  } else {
    all.resize(total);
  }
  FURNACE_ASSERT(all.size() == total) << "DistributedSampler: " << all.size() << " of " << total << " indices";
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(options_.rank); i < total; i += static_cast<size_t>(options_.num_replicas))
    mine.push_back(all[i]);
  return mine;
}

}  // namespace furnace
