// libFuzzer target for the IDX reader (runtime/src/data/idx.cpp: MNIST's format, raw or gzip),
// which reads `--data` folders and FURNACE_DATA_DIR's datasets. The input becomes files on disk
// (the reader takes paths, as zlib does):
//   byte 0 bit 0 = 0: the rest is one file, read by read_idx as rank 1 (bit 1 = 0) or rank 3;
//   byte 0 bit 0 = 1: a dataset folder for load_mnist_split: bytes 1-2 (big-endian) say how many
//                     of the remaining bytes are the images file; the labels file gets the rest.
// Files starting with 1f 8b are gzip streams (the reader opens both kinds the same way). Every
// input gives an array/dataset that keeps the format's promises, or one clear line.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "furnace/data.h"
#include "fuzz_common.h"

namespace {

using namespace furnace;
using fuzz::require;
namespace fs = std::filesystem;

// One scratch folder per fuzzing process (several may run in parallel with -jobs), removed when
// the process exits. /dev/shm when there is one: the files are rewritten for every input.
struct Scratch {
  fs::path dir;
  Scratch() {
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    dir = base / ("furnace_fuzz_idx_" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const fs::path& scratch() {
  static const Scratch s;
  return s.dir;
}

void write(const fs::path& p, const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(p.c_str(), "wb");
  require(f != nullptr, "scratch file opens");
  if (size) require(std::fwrite(data, 1, size, f) == size, "scratch file written");
  std::fclose(f);
}

void check_array(const IdxArray& a, int rank) {
  require(static_cast<int>(a.dims.size()) == rank, "rank as asked");
  uint64_t count = 1;
  for (uint32_t d : a.dims) count *= d;  // at most 2^36 (the reader's limit), no overflow
  require(a.data.size() == count, "exactly prod(dims) bytes");
}

void check_split(const ImageDataset& d) {
  require(d.n > 0 && d.rows > 0 && d.cols > 0, "a usable split");
  require(d.labels.size() == static_cast<size_t>(d.n), "one label per image");
  require(d.pixels.size() == static_cast<size_t>(d.n) * d.rows * d.cols, "n * rows * cols pixels");
  for (int32_t l : d.labels) require(l >= 0 && l <= 9, "labels in 0..9");
  for (size_t b = 0; b < d.value_of.size(); ++b)
    require(d.value_of[b] == static_cast<float>(b) / 255.0f, "each pixel byte stands for byte / 255");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  if ((mode & 1) == 0) {
    const fs::path p = scratch() / "array-idx-ubyte";
    write(p, data + 1, size - 1);
    const int rank = (mode & 2) ? 3 : 1;
    IdxArray a;
    if (fuzz::accepts([&] { a = read_idx(p.string(), rank); })) check_array(a, rank);
    return 0;
  }
  if (size < 3) return 0;
  const size_t rest = size - 3;
  const size_t n_images = std::min<size_t>(rest, (size_t{data[1]} << 8) | data[2]);
  static const fs::path dir = scratch() / "split";
  fs::create_directories(dir);
  // Bit 1 chooses the names with .gz (the loader prefers them): the same bytes either way.
  const std::string ext = (mode & 2) ? ".gz" : "", other = (mode & 2) ? "" : ".gz";
  fs::remove(dir / ("train-images-idx3-ubyte" + other));
  fs::remove(dir / ("train-labels-idx1-ubyte" + other));
  write(dir / ("train-images-idx3-ubyte" + ext), data + 3, n_images);
  write(dir / ("train-labels-idx1-ubyte" + ext), data + 3 + n_images, rest - n_images);
  ImageDataset d;
  if (fuzz::accepts([&] { d = load_mnist_split(dir.string(), "train"); })) check_split(d);
  return 0;
}
