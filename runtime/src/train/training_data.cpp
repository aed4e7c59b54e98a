// train/training_data: see training_data.h.
#include "train/training_data.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include <zlib.h>

#include "furnace/error.h"

namespace furnace {
namespace {

ImageDataset load_split(const Scenario& sc, const std::string& dir, const char* prefix) {
  FURNACE_CHECK(!sc.data_dir.empty() || std::filesystem::exists(dir))
      << "Fashion-MNIST not found in " << dir
      << ": install it with 'apt-get install dataset-fashion-mnist', or pass --data DIR "
         "(a small slice ships in data/fashion-mnist)";
  return load_mnist_split(dir, prefix);
}

// transforms.Normalize with the training set's own mean and standard deviation (for
// Fashion-MNIST 0.2860 and 0.3530), applied to both splits: to the float each pixel byte stands
// for, which is the same as to every pixel.
void normalize_splits(ImageDataset& train_set, ImageDataset& test_set) {
  double sum = 0, sq = 0;
  for (uint8_t p : train_set.pixels) {  // pixel by pixel, in order: the sums' roundings as ever
    const float v = train_set.value_of[p];
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(train_set.pixels.size());
  const double mean = sum / n;
  const double stdev = std::sqrt(std::max(sq / n - mean * mean, 1e-12));
  for (ImageDataset* ds : {&train_set, &test_set})
    for (float& v : ds->value_of) v = static_cast<float>((v - mean) / stdev);
}

// CRC32 of the training images (their floats, pixel / 255, a block at a time) and labels: the
// data's fingerprint in a checkpoint.
uint32_t dataset_checksum(const ImageDataset& ds) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  auto add = [&crc](const void* data, size_t bytes) {
    const auto* p = static_cast<const Bytef*>(data);
    for (size_t done = 0; done < bytes;) {
      const uInt n = static_cast<uInt>(std::min<size_t>(bytes - done, size_t{1} << 30));
      crc = ::crc32(crc, p + done, n);
      done += n;
    }
  };
  std::array<float, 4096> block;
  for (size_t done = 0; done < ds.pixels.size();) {
    const size_t n = std::min(ds.pixels.size() - done, block.size());
    for (size_t i = 0; i < n; ++i) block[i] = ds.value(done + i);
    add(block.data(), n * sizeof(float));
    done += n;
  }
  add(ds.labels.data(), ds.labels.size() * sizeof(int32_t));
  return static_cast<uint32_t>(crc);
}

}  // namespace

std::shared_ptr<const TrainingData> load_training_data(const Scenario& sc, bool with_crc) {
  auto d = std::make_shared<TrainingData>();
  d->dir = sc.data_dir.empty() ? default_fashion_mnist_dir() : sc.data_dir;
  d->train = load_split(sc, d->dir, "train");
  if (sc.evaluate) {
    d->test = load_split(sc, d->dir, "t10k");
    // The model's input width comes from the training images: test images of another size would
    // fail only after the whole run, at the first evaluation.
    FURNACE_CHECK(d->test.rows == d->train.rows && d->test.cols == d->train.cols)
        << d->dir << ": the test images are " << d->test.rows << "x" << d->test.cols << " and the training images "
        << d->train.rows << "x" << d->train.cols << " (t10k-images-idx3-ubyte against train-images-idx3-ubyte): "
        << "the model takes one size";
  }
  // The data's fingerprint, as read from disk: a resumed run must see the same samples.
  if (with_crc) d->crc = dataset_checksum(d->train);
  if (sc.normalize) normalize_splits(d->train, d->test);
  FURNACE_CHECK(sc.batch <= d->train.n)
      << "--batch " << sc.batch << " is larger than the training set (" << d->train.n << " images in "
      << d->dir << ")";
  return d;
}

std::vector<int> mlp_layer_sizes(const Scenario& sc, const TrainingData& data) {
  std::vector<int> sizes{data.train.rows * data.train.cols};
  sizes.insert(sizes.end(), sc.hidden.begin(), sc.hidden.end());
  sizes.push_back(10);
  return sizes;
}

}  // namespace furnace
