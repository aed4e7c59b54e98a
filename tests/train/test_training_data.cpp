// The splits a run trains on (train/training_data.h) against the straightforward conversion they
// replace: every pixel turned into a float once (byte / 255), the training set's mean and
// standard deviation summed over those floats in order, every float normalised, and the
// checkpoint's CRC over the floats as read. The dataset keeps its bytes and a table instead; a
// fetched image must have exactly these bits, or a run would no longer be the run it was.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "furnace/data.h"  // defines: read_idx
#include "furnace/train.h"
#include "train/training_data.h"

namespace furnace {
namespace {

const std::string kSliceDir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";

std::vector<float> as_floats(const IdxArray& raw) {
  std::vector<float> out(raw.data.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = raw.data[i] / 255.0f;
  return out;
}

// Every image of `ds`, fetched one at a time, bit for bit against `expected` (n x features).
void expect_images_are(const ImageDataset& ds, const std::vector<float>& expected, const char* split) {
  const int64_t f = ds.features();
  ASSERT_EQ(static_cast<size_t>(ds.n * f), expected.size()) << split;
  std::vector<float> image(static_cast<size_t>(f));
  for (int64_t index = 0; index < ds.n; ++index) {
    ds.image(index, image.data());
    ASSERT_EQ(std::memcmp(image.data(), expected.data() + index * f, image.size() * sizeof(float)), 0)
        << split << " image " << index << " differs from the whole split converted once";
  }
}

Scenario slice_scenario() {
  Scenario sc;
  sc.data_dir = kSliceDir;
  sc.batch = 64;
  return sc;
}

TEST(TrainingData, NormalisedImagesHaveTheBitsOfConvertingTheWholeSplitOnce) {
  std::vector<float> train = as_floats(read_idx(kSliceDir + "/train-images-idx3-ubyte.gz", 3));
  std::vector<float> test = as_floats(read_idx(kSliceDir + "/t10k-images-idx3-ubyte.gz", 3));
  double sum = 0, sq = 0;
  for (float v : train) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double mean = sum / static_cast<double>(train.size());
  const double stdev = std::sqrt(std::max(sq / static_cast<double>(train.size()) - mean * mean, 1e-12));
  for (std::vector<float>* split : {&train, &test})
    for (float& v : *split) v = static_cast<float>((v - mean) / stdev);
  EXPECT_NEAR(mean, 0.286, 0.01);  // Fashion-MNIST's, about, on the slice too
  EXPECT_NEAR(stdev, 0.353, 0.01);

  const auto data = load_training_data(slice_scenario(), /*with_crc=*/false);
  expect_images_are(data->train, train, "train");
  expect_images_are(data->test, test, "t10k");
}

TEST(TrainingData, WithoutNormalisationAnImageIsItsPixelsOver255) {
  Scenario sc = slice_scenario();
  sc.normalize = false;
  sc.evaluate = false;
  const auto data = load_training_data(sc, /*with_crc=*/false);
  expect_images_are(data->train, as_floats(read_idx(kSliceDir + "/train-images-idx3-ubyte.gz", 3)), "train");
  EXPECT_EQ(data->test.n, 0);  // not read when the run does not evaluate
}

TEST(TrainingData, TheFingerprintIsTheCrcOfThePixelsAsFloatsAndTheLabels) {
  // What checkpoints written before the bytes were kept hold: resuming them must still match.
  const std::vector<float> pixels = as_floats(read_idx(kSliceDir + "/train-images-idx3-ubyte.gz", 3));
  std::vector<int32_t> labels;
  for (uint8_t l : read_idx(kSliceDir + "/train-labels-idx1-ubyte.gz", 1).data) labels.push_back(l);
  uLong crc = ::crc32(0L, Z_NULL, 0);
  crc = ::crc32(crc, reinterpret_cast<const Bytef*>(pixels.data()), static_cast<uInt>(pixels.size() * sizeof(float)));
  crc = ::crc32(crc, reinterpret_cast<const Bytef*>(labels.data()), static_cast<uInt>(labels.size() * sizeof(int32_t)));

  const auto data = load_training_data(slice_scenario(), /*with_crc=*/true);
  EXPECT_EQ(data->crc, static_cast<uint32_t>(crc));
  // The slice's fingerprint in a checkpoint that the build before the bytes were kept (7a97a13)
  // wrote: `furnace train --data data/fashion-mnist --steps 2 --checkpoint F`, loader.dataset_crc.
  EXPECT_EQ(data->crc, 1891409250u);
}

TEST(TrainingData, ADatasetMadeByHandStandsForPixelsOver255) {
  ImageDataset ds;  // no loader involved: the table must not be zeros
  ds.n = 1;
  ds.rows = 1;
  ds.cols = 3;
  ds.pixels = {0, 51, 255};
  std::vector<float> image(3);
  ds.image(0, image.data());
  EXPECT_EQ(image, (std::vector<float>{0.0f, 0.2f, 1.0f}));
}

}  // namespace
}  // namespace furnace
