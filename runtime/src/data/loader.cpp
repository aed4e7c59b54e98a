// DataLoader: seeded Fisher-Yates shuffle per epoch, then contiguous batches of the permutation.
#include "furnace/loader.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "furnace/error.h"
#include "furnace/random.h"

namespace furnace {

DataLoader::DataLoader(const ImageDataset& dataset, int64_t batch_size, bool shuffle,
                       bool drop_last, uint64_t seed)
    : dataset_(dataset), batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last), seed_(seed) {
  FURNACE_CHECK(batch_size > 0)
      << "batch_size should be a positive integer value, but got batch_size=" << batch_size;
  start_epoch(0);
}

int64_t DataLoader::num_batches() const {
  const int64_t n = dataset_.n;
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

void DataLoader::start_epoch(int64_t epoch) {
  order_.resize(static_cast<size_t>(dataset_.n));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (shuffle_) {
    Generator gen(seed_ * 0x100000001B3ull + static_cast<uint64_t>(epoch) + 1);
    for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[gen.below(i)]);
  }
  position_ = 0;
}

bool DataLoader::next(Batch& out) {
  const int64_t remaining = dataset_.n - position_;
  if (remaining <= 0 || (drop_last_ && remaining < batch_size_)) return false;
  const int64_t size = std::min(batch_size_, remaining);
  const int64_t features = static_cast<int64_t>(dataset_.rows) * dataset_.cols;
  out.size = size;
  out.features = features;
  out.images.resize(static_cast<size_t>(size * features));
  out.labels.resize(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const int64_t idx = order_[static_cast<size_t>(position_ + i)];
    std::memcpy(out.images.data() + i * features, dataset_.images.data() + idx * features,
                sizeof(float) * static_cast<size_t>(features));
    out.labels[static_cast<size_t>(i)] = dataset_.labels[static_cast<size_t>(idx)];
  }
  position_ += size;
  return true;
}

}  // namespace furnace
