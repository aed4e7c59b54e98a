// The IDX reader and the MNIST split loader: the committed Fashion-MNIST slice, raw and gzip files
// written here, and every error, whose one-line message must name the file and the reason.
#include "furnace/data.h"  // defines: read_idx, load_mnist_split, default_fashion_mnist_dir

#include <gtest/gtest.h>
#include <zlib.h>  // defines: gzopen, gzwrite (to write test files)

#include <algorithm>  // defines: std::equal
#include <cstdint>
#include <filesystem>  // defines: temp_directory_path, create_directories, remove_all
#include <fstream>     // defines: std::ofstream, std::ifstream
#include <initializer_list>
#include <iterator>  // defines: std::istreambuf_iterator
#include <string>
#include <utility>  // defines: std::pair
#include <vector>

#include <unistd.h>  // defines: getpid

#include "furnace/error.h"  // defines: furnace::Error

#ifndef FURNACE_TEST_DATA_DIR
#error "FURNACE_TEST_DATA_DIR must point at the repository's data/ folder"
#endif

namespace furnace {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

const std::string kSliceDir = std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist";

// An IDX file image: big-endian magic, dims, then the payload as given (which may be short or long).
Bytes idx_bytes(uint32_t magic, std::initializer_list<uint32_t> dims, const Bytes& payload) {
  Bytes out;
  auto put32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
  };
  put32(magic);
  for (uint32_t d : dims) put32(d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

Bytes iota_bytes(size_t n, uint8_t start = 0) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(start + i);
  return b;
}

void write_raw(const fs::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  ASSERT_TRUE(f.good()) << p;
}

void write_gz(const fs::path& p, const Bytes& b) {
  gzFile f = gzopen(p.string().c_str(), "wb");
  ASSERT_NE(f, nullptr) << p;
  if (!b.empty()) {
    ASSERT_EQ(gzwrite(f, b.data(), unsigned(b.size())), int(b.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

Bytes read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

// Runs `fn`, which must throw furnace::Error, and returns the message.
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no furnace::Error thrown";
  return {};
}

// The message is one line and contains every piece.
void expect_message(const std::string& msg, std::initializer_list<std::string> pieces) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
  for (const std::string& p : pieces)
    EXPECT_NE(msg.find(p), std::string::npos) << "message lacks \"" << p << "\": " << msg;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("furnace_test_idx_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// ---- the committed slice ---------------------------------------------------------------------

TEST_F(IdxTest, ReadsTheCommittedGzipSlice) {
  const IdxArray images = read_idx(kSliceDir + "/train-images-idx3-ubyte.gz", 3);
  EXPECT_EQ(images.dims, (std::vector<uint32_t>{2000, 28, 28}));
  EXPECT_EQ(images.data.size(), 2000u * 28 * 28);
  const IdxArray labels = read_idx(kSliceDir + "/t10k-labels-idx1-ubyte.gz", 1);
  EXPECT_EQ(labels.dims, (std::vector<uint32_t>{500}));
  // The first test labels of Fashion-MNIST: Ankle boot, Pullover, Trouser, Trouser, Shirt, ...
  EXPECT_EQ(Bytes(labels.data.begin(), labels.data.begin() + 8), (Bytes{9, 2, 1, 1, 6, 1, 4, 6}));
}

TEST_F(IdxTest, LoadsBothCommittedSplits) {
  for (const auto& [prefix, n] : {std::pair<std::string, int64_t>{"train", 2000}, {"t10k", 500}}) {
    const ImageDataset ds = load_mnist_split(kSliceDir, prefix);
    EXPECT_EQ(ds.n, n) << prefix;
    EXPECT_EQ(ds.rows, 28);
    EXPECT_EQ(ds.cols, 28);
    ASSERT_EQ(ds.pixels.size(), size_t(n) * 28 * 28);
    ASSERT_EQ(ds.labels.size(), size_t(n));
    const IdxArray raw = read_idx(kSliceDir + "/" + prefix + "-images-idx3-ubyte.gz", 3);
    for (size_t i = 0; i < ds.pixels.size(); ++i)
      ASSERT_EQ(ds.value(i), raw.data[i] / 255.0f) << prefix << " pixel " << i;
    // A fetched image is its pixels' floats, in order.
    std::vector<float> image(28 * 28);
    for (int64_t index : {int64_t{0}, n / 2, n - 1}) {
      ds.image(index, image.data());
      for (size_t f = 0; f < image.size(); ++f)
        ASSERT_EQ(image[f], raw.data[static_cast<size_t>(index) * 784 + f] / 255.0f) << prefix << " image " << index;
    }
    std::vector<int> per_class(10, 0);
    for (int32_t l : ds.labels) {
      ASSERT_GE(l, 0);
      ASSERT_LE(l, 9);
      ++per_class[l];
    }
    for (int c = 0; c < 10; ++c) EXPECT_GT(per_class[c], 0) << prefix << " has no class " << c;
  }
  EXPECT_EQ(load_mnist_split(kSliceDir, "train").labels[0], 9);  // the first image is an ankle boot
}

TEST_F(IdxTest, EveryPixelByteStandsForItsValueOver255) {
  // The table is built at compile time: each entry must be the division the CPU does at run time.
  volatile float divisor = 255.0f;
  const ImageDataset ds;
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ds.value_of[static_cast<size_t>(b)], static_cast<float>(b) / divisor) << b;
}

TEST_F(IdxTest, DefaultDirIsDebians) {
  EXPECT_EQ(default_fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
}

// ---- files written here ----------------------------------------------------------------------

TEST_F(IdxTest, ReadsRawAndGzipFilesAlike) {
  const Bytes file = idx_bytes(0x00000803, {3, 2, 4}, iota_bytes(24, 200));
  write_raw(path("raw.idx"), file);
  write_gz(path("packed.idx.gz"), file);
  for (const std::string name : {"raw.idx", "packed.idx.gz"}) {
    const IdxArray a = read_idx(path(name), 3);
    EXPECT_EQ(a.dims, (std::vector<uint32_t>{3, 2, 4})) << name;
    EXPECT_EQ(Bytes(a.data.begin(), a.data.end()), iota_bytes(24, 200)) << name;
  }
}

TEST_F(IdxTest, LoadsARawSplitWhenThereIsNoGzip) {
  write_raw(path("t10k-images-idx3-ubyte"), idx_bytes(0x803, {2, 1, 3}, {0, 51, 255, 1, 2, 3}));
  write_raw(path("t10k-labels-idx1-ubyte"), idx_bytes(0x801, {2}, {7, 0}));
  const ImageDataset ds = load_mnist_split(dir_.string(), "t10k");
  EXPECT_EQ(ds.n, 2);
  EXPECT_EQ(ds.rows, 1);
  EXPECT_EQ(ds.cols, 3);
  std::vector<float> values(6);
  ds.image(0, values.data());
  ds.image(1, values.data() + 3);
  EXPECT_EQ(values, (std::vector<float>{0.0f, 0.2f, 1.0f, 1 / 255.0f, 2 / 255.0f, 3 / 255.0f}));
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{7, 0}));
}

// ---- errors ----------------------------------------------------------------------------------

TEST_F(IdxTest, WrongMagicIsNotAnIdxFile) {
  write_raw(path("archive.zip"), {'P', 'K', 3, 4, 0, 0, 0, 0});
  expect_message(error_of([&] { read_idx(path("archive.zip"), 3); }),
                 {path("archive.zip"), "not an IDX file (magic 0x504b0304)"});
}

TEST_F(IdxTest, WrongElementTypeOrRankIsNamed) {
  write_gz(path("floats.gz"), idx_bytes(0x00000d03, {1, 1, 1}, {0, 0, 0, 0}));
  expect_message(error_of([&] { read_idx(path("floats.gz"), 3); }),
                 {path("floats.gz"), "unsupported IDX element type 0x0d", "magic 0x00000d03"});
  write_gz(path("labels.gz"), idx_bytes(0x801, {2}, {1, 2}));
  expect_message(error_of([&] { read_idx(path("labels.gz"), 3); }),
                 {path("labels.gz"), "expected a rank-3 IDX file (magic 0x00000803)",
                  "found rank 1 (magic 0x00000801)"});
}

TEST_F(IdxTest, TruncatedDataSaysHowMuchIsMissing) {
  const Bytes file = idx_bytes(0x803, {10, 2, 2}, iota_bytes(30));  // header promises 40 bytes
  write_raw(path("short.idx"), file);
  write_gz(path("short.idx.gz"), file);
  for (const std::string name : {"short.idx", "short.idx.gz"})
    expect_message(error_of([&] { read_idx(path(name), 3); }),
                   {path(name), "truncated: expected 40 bytes of data, found 30"});
}

TEST_F(IdxTest, TruncatedGzipStreamIsTruncated) {
  // The committed labels file cut in half: the gzip stream itself ends early.
  Bytes gz = read_file(kSliceDir + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_GT(gz.size(), 100u);
  gz.resize(gz.size() / 2);
  write_raw(path("cut.gz"), gz);
  expect_message(error_of([&] { read_idx(path("cut.gz"), 1); }),
                 {path("cut.gz"), "truncated: expected 500 bytes of data, found "});
}

TEST_F(IdxTest, CorruptGzipDataIsNamed) {
  // A gzip header followed by bytes that are not a deflate stream.
  write_raw(path("bad.gz"), {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 'g', 'a', 'r', 'b', 'a', 'g', 'e'});
  const std::string msg = error_of([&] { read_idx(path("bad.gz"), 1); });
  expect_message(msg, {path("bad.gz"), ": corrupt gzip data: "});
  EXPECT_EQ(msg.find(path("bad.gz")), msg.rfind(path("bad.gz"))) << "path named twice: " << msg;
}

TEST_F(IdxTest, TrailingBytesAreAnError) {
  write_gz(path("long.gz"), idx_bytes(0x801, {3}, {1, 2, 3, 4}));
  expect_message(error_of([&] { read_idx(path("long.gz"), 1); }),
                 {path("long.gz"), "trailing bytes after the 3 bytes of data"});
}

TEST_F(IdxTest, TruncatedHeaderIsNamed) {
  write_raw(path("two.idx"), {0, 0});
  expect_message(error_of([&] { read_idx(path("two.idx"), 1); }),
                 {path("two.idx"), "truncated header: expected at least 4 bytes, found 2"});
  write_gz(path("dims.gz"), idx_bytes(0x803, {60000}, {}));  // rank 3 but only one dim
  expect_message(error_of([&] { read_idx(path("dims.gz"), 3); }),
                 {path("dims.gz"), "truncated header: expected 16 bytes, found 8"});
  write_gz(path("empty.gz"), {});
  expect_message(error_of([&] { read_idx(path("empty.gz"), 1); }),
                 {path("empty.gz"), "truncated header: expected at least 4 bytes, found 0"});
}

TEST_F(IdxTest, ImplausibleDimsAreRejectedWithoutAllocating) {
  write_gz(path("huge.gz"), idx_bytes(0x803, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {1, 2}));
  expect_message(error_of([&] { read_idx(path("huge.gz"), 3); }),
                 {path("huge.gz"), "implausible IDX dims"});
}

TEST_F(IdxTest, MissingFileCannotBeOpened) {
  expect_message(error_of([&] { read_idx(path("nope-idx1-ubyte.gz"), 1); }),
                 {path("nope-idx1-ubyte.gz"), "cannot open: No such file or directory"});
  expect_message(error_of([&] { read_idx(dir_.string(), 1); }),
                 {dir_.string(), "cannot open: is a directory"});
}

TEST_F(IdxTest, SplitNamesTheMissingFiles) {
  expect_message(error_of([&] { load_mnist_split(dir_.string(), "train"); }),
                 {dir_.string(), "missing train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]"});
  write_gz(path("train-images-idx3-ubyte.gz"), idx_bytes(0x803, {1, 1, 1}, {0}));
  expect_message(error_of([&] { load_mnist_split(dir_.string(), "train"); }),
                 {dir_.string(), "missing train-labels-idx1-ubyte[.gz]"});
  expect_message(error_of([&] { load_mnist_split(path("absent"), "train"); }),
                 {path("absent"), "dataset directory does not exist"});
  expect_message(error_of([&] { load_mnist_split(dir_.string(), "test"); }),
                 {dir_.string(), "unknown split prefix 'test'", "\"t10k\""});
}

TEST_F(IdxTest, ImageAndLabelCountsMustAgree) {
  write_gz(path("train-images-idx3-ubyte.gz"), idx_bytes(0x803, {3, 1, 1}, {0, 1, 2}));
  write_gz(path("train-labels-idx1-ubyte.gz"), idx_bytes(0x801, {2}, {0, 1}));
  expect_message(error_of([&] { load_mnist_split(dir_.string(), "train"); }),
                 {dir_.string(), "train has 3 images (train-images-idx3-ubyte.gz)",
                  "but 2 labels (train-labels-idx1-ubyte.gz)"});
}

TEST_F(IdxTest, LabelsMustBeZeroToNine) {
  write_gz(path("train-images-idx3-ubyte.gz"), idx_bytes(0x803, {3, 1, 1}, {0, 1, 2}));
  write_gz(path("train-labels-idx1-ubyte.gz"), idx_bytes(0x801, {3}, {0, 10, 1}));
  expect_message(error_of([&] { load_mnist_split(dir_.string(), "train"); }),
                 {path("train-labels-idx1-ubyte.gz"), "label 10 at index 1 is outside 0..9"});
}

// ---- the full dataset, when Debian's package is installed ------------------------------------

TEST_F(IdxTest, LoadsTheFullTestSplitWhenInstalled) {
  const std::string dir = default_fashion_mnist_dir();
  if (!fs::exists(dir + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << dir << " not installed (apt-get install dataset-fashion-mnist)";
  const ImageDataset full = load_mnist_split(dir, "t10k");
  EXPECT_EQ(full.n, 10000);
  const ImageDataset slice = load_mnist_split(kSliceDir, "t10k");  // the slice is its first 500
  ASSERT_LE(slice.pixels.size(), full.pixels.size());
  EXPECT_TRUE(std::equal(slice.pixels.begin(), slice.pixels.end(), full.pixels.begin()));
  EXPECT_TRUE(std::equal(slice.labels.begin(), slice.labels.end(), full.labels.begin()));
}

}  // namespace
}  // namespace furnace
