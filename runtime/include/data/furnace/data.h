// furnace/data.h: reading datasets from disk: the IDX format (MNIST, Fashion-MNIST), gzip or raw.
// Not here: batching, shuffling and worker threads (the DataLoader), or anything on a device.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "furnace/bulk_allocator.h"  // defines: BulkAllocator

namespace furnace {

// An unsigned-byte IDX array: `data` holds prod(dims) bytes in row-major order.
struct IdxArray {
  std::vector<uint8_t, BulkAllocator<uint8_t>> data;
  std::vector<uint32_t> dims;  // e.g. (N, 28, 28) for images, (N) for labels
};

// Reads a u8 IDX file, gzip-compressed or raw (both are read transparently). Checks the magic
// (0x00000801 for 1-D labels, 0x00000803 for 3-D images: two zero bytes, type byte 0x08 = unsigned
// byte, then the rank), that the rank is `expected_rank`, and that exactly prod(dims) bytes follow.
// Throws furnace::Error with one line naming the file, e.g.
//   "<path>: not an IDX file (magic 0x...)"
//   "<path>: truncated: expected N bytes of data, found M"
//   "<path>: cannot open: No such file or directory"
IdxArray read_idx(const std::string& path, int expected_rank);

// byte / 255 in float for every byte, as ToTensor divides (correctly rounded, as at run time).
constexpr std::array<float, 256> pixel_over_255() {
  std::array<float, 256> out{};
  for (size_t b = 0; b < out.size(); ++b) out[b] = static_cast<float>(b) / 255.0f;
  return out;
}

// One split of an MNIST-style dataset, ready for training. The pixels stay the file's bytes and
// become floats as a sample is fetched, as torchvision's MNIST keeps its uint8 tensor and
// converts each item: a float per pixel held four times the memory (188 MB for Fashion-MNIST's
// training split), and mapping it in was most of `furnace train`'s start. Each byte stands for
// one float (`value_of`: byte / 255, then normalised in place when the run normalises), so a
// fetched sample has the bits that converting the whole split up front gave.
struct ImageDataset {
  std::vector<uint8_t, BulkAllocator<uint8_t>> pixels;  // (n, rows * cols), as in the file
  std::array<float, 256> value_of = pixel_over_255();   // the float each pixel byte stands for
  std::vector<int32_t> labels;                          // (n), each in 0..9
  int64_t n = 0;
  int rows = 0, cols = 0;

  int64_t features() const { return int64_t{rows} * cols; }
  // Pixel i of the whole split (image i / features(), feature i % features()) as a float.
  float value(size_t i) const { return value_of[pixels[i]]; }
  // Writes image `index`'s features() floats to `out`.
  void image(int64_t index, float* out) const;
};

// Loads <dir>/<prefix>-images-idx3-ubyte[.gz] and <dir>/<prefix>-labels-idx1-ubyte[.gz] (prefix
// "train" or "t10k"; the .gz name is preferred when both exist). Checks that the image and label
// counts agree and that every label is in 0..9. Throws furnace::Error with one line naming the
// directory or file and what is wrong or missing.
ImageDataset load_mnist_split(const std::string& dir, const std::string& prefix);

// The IDX files of both splits that exist in `dir` (raw and .gz names): the files a run reads,
// which nothing it writes may replace.
std::vector<std::string> mnist_files(const std::string& dir);

// Where Debian's dataset-fashion-mnist package installs the full dataset:
// "/usr/share/datasets/fashion-mnist".
std::string default_fashion_mnist_dir();

}  // namespace furnace
