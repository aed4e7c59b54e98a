// The IDX reader (MNIST's file format) and the MNIST/Fashion-MNIST split loader.
// Not here: batching or shuffling (the DataLoader). Files are read through zlib's gz* functions,
// which read gzip-compressed and raw files alike. Every error is one line naming the file.
//
// IDX layout (big-endian): u8 0, u8 0, u8 type (0x08 = unsigned byte), u8 rank, then rank u32 dims,
// then prod(dims) elements in row-major order.
#include "furnace/data.h"  // defines: IdxArray, read_idx, ImageDataset, load_mnist_split

#include <zlib.h>  // defines: gzopen, gzread, gzerror, gzclose

#include <algorithm>    // defines: std::min
#include <cerrno>       // defines: errno
#include <climits>      // defines: INT_MAX
#include <cstring>      // defines: std::strerror
#include <filesystem>   // defines: std::filesystem::path, exists, is_directory
#include <iomanip>      // defines: std::setw, std::setfill
#include <memory>       // defines: std::unique_ptr
#include <sstream>      // defines: std::ostringstream
#include <utility>      // defines: std::move

#include "furnace/error.h"  // defines: FURNACE_CHECK, FURNACE_ASSERT
#include "furnace/file_kind.h"  // defines: is_special_file

namespace furnace {
namespace {

namespace fs = std::filesystem;

constexpr uint8_t kIdxTypeU8 = 0x08;
constexpr uint64_t kMaxIdxBytes = uint64_t(1) << 36;  // 64 GiB: anything larger is a corrupt header
constexpr uint64_t kReserveBytes = uint64_t(1) << 26;  // 64 MiB: Fashion-MNIST's 47 MB of training pixels

std::string hex32(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

std::string hex8(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(2) << std::setfill('0') << v;
  return os.str();
}

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

GzHandle open_gz(const std::string& path) {
  FURNACE_CHECK(!fs::is_directory(path)) << path << ": cannot open: is a directory";
  FURNACE_CHECK(!is_special_file(path)) << path << ": cannot open: not a regular file";
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  const int err = errno;
  FURNACE_CHECK(f != nullptr) << path << ": cannot open: "
                              << (err ? std::strerror(err) : "zlib could not allocate its state");
  gzbuffer(f, 1 << 17);
  return GzHandle(f);
}

using Bytes = std::vector<uint8_t, BulkAllocator<uint8_t>>;  // IdxArray::data's type

// Reads up to `n` bytes, appending to `out`; returns how many arrived. Stops early at end of file
// (including a gzip stream that ends early); throws on corrupt compressed data or an I/O error.
size_t read_into(gzFile f, const std::string& path, Bytes& out, size_t n) {
  constexpr size_t kChunk = size_t(1) << 20;
  size_t got = 0;
  while (got < n) {
    const size_t want = std::min(kChunk, n - got);
    const size_t old = out.size();
    out.resize(old + want);
    const int r = gzread(f, out.data() + old, static_cast<unsigned>(want));
    if (r < 0) {
      int errnum = 0;
      std::string msg = gzerror(f, &errnum);
      out.resize(old);
      if (errnum == Z_BUF_ERROR) break;  // the gzip stream ends early: the caller reports the shortfall
      if (msg.rfind(path + ": ", 0) == 0) msg.erase(0, path.size() + 2);  // zlib prefixes the path
      FURNACE_CHECK(errnum != Z_DATA_ERROR) << path << ": corrupt gzip data: " << msg;
      FURNACE_FAIL() << path << ": read error: " << (errnum == Z_ERRNO ? std::strerror(errno) : msg);
    }
    out.resize(old + static_cast<size_t>(r));
    got += static_cast<size_t>(r);
    if (static_cast<size_t>(r) < want) break;
  }
  return got;
}

// The file name to use for <dir>/<stem>: the .gz one if present, else the raw one, else "".
std::string find_idx_file(const fs::path& dir, const std::string& stem) {
  for (const std::string& name : {stem + ".gz", stem}) {
    const fs::path p = dir / name;
    if (fs::exists(p) && !fs::is_directory(p)) return p.string();
  }
  return {};
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_rank) {
  FURNACE_ASSERT(expected_rank >= 1 && expected_rank <= 255) << "expected_rank " << expected_rank;
  GzHandle gz = open_gz(path);

  Bytes header;
  const size_t n_magic = read_into(gz.get(), path, header, 4);
  FURNACE_CHECK(n_magic == 4) << path << ": truncated header: expected at least 4 bytes, found "
                              << n_magic;
  const uint32_t magic = load_be32(header.data());
  FURNACE_CHECK(header[0] == 0 && header[1] == 0) << path << ": not an IDX file (magic "
                                                  << hex32(magic) << ")";
  FURNACE_CHECK(header[2] == kIdxTypeU8)
      << path << ": unsupported IDX element type " << hex8(header[2]) << " (magic " << hex32(magic)
      << "); only 0x08 (unsigned byte) is supported";
  const int rank = header[3];
  FURNACE_CHECK(rank == expected_rank)
      << path << ": expected a rank-" << expected_rank << " IDX file (magic "
      << hex32(0x0800u | uint32_t(expected_rank)) << "), found rank " << rank << " (magic "
      << hex32(magic) << ")";

  const size_t header_size = 4 + 4 * size_t(rank);
  const size_t n_dims = read_into(gz.get(), path, header, header_size - 4);
  FURNACE_CHECK(n_dims == header_size - 4) << path << ": truncated header: expected " << header_size
                                           << " bytes, found " << 4 + n_dims;

  IdxArray out;
  uint64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    const uint32_t d = load_be32(header.data() + 4 + 4 * i);
    out.dims.push_back(d);
    count = d == 0 ? 0 : (count > kMaxIdxBytes / d ? kMaxIdxBytes + 1 : count * d);
  }
  FURNACE_CHECK(count <= kMaxIdxBytes) << path << ": implausible IDX dims (more than "
                                       << kMaxIdxBytes << " bytes of data); the header is corrupt";

  // Grows as data arrives, so a corrupt header cannot make us fill memory the file does not hold;
  // up to kReserveBytes is reserved up front (address space only, until data arrives), so a
  // dataset of that size is read without moving what has arrived at each doubling.
  out.data.reserve(static_cast<size_t>(std::min<uint64_t>(count, kReserveBytes)));
  const size_t found = read_into(gz.get(), path, out.data, static_cast<size_t>(count));
  FURNACE_CHECK(found == count) << path << ": truncated: expected " << count
                                << " bytes of data, found " << found;
  Bytes extra;
  const size_t n_extra = read_into(gz.get(), path, extra, 1);
  FURNACE_CHECK(n_extra == 0) << path << ": trailing bytes after the " << count
                              << " bytes of data the header describes";
  return out;
}

std::vector<std::string> mnist_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const char* prefix : {"train", "t10k"})
    for (const char* kind : {"-images-idx3-ubyte", "-labels-idx1-ubyte"})
      for (const char* gz : {"", ".gz"}) {
        const fs::path p = fs::path(dir) / (std::string(prefix) + kind + gz);
        if (fs::is_regular_file(p, ec)) out.push_back(p.string());
      }
  return out;
}

ImageDataset load_mnist_split(const std::string& dir, const std::string& prefix) {
  FURNACE_CHECK(prefix == "train" || prefix == "t10k")
      << dir << ": unknown split prefix '" << prefix << "' (use \"train\" or \"t10k\")";
  FURNACE_CHECK(fs::is_directory(dir)) << dir << ": dataset directory does not exist";

  const std::string images_stem = prefix + "-images-idx3-ubyte";
  const std::string labels_stem = prefix + "-labels-idx1-ubyte";
  const std::string images_path = find_idx_file(dir, images_stem);
  const std::string labels_path = find_idx_file(dir, labels_stem);
  FURNACE_CHECK(!images_path.empty() || !labels_path.empty())
      << dir << ": missing " << images_stem << "[.gz] and " << labels_stem << "[.gz]";
  FURNACE_CHECK(!images_path.empty()) << dir << ": missing " << images_stem << "[.gz]";
  FURNACE_CHECK(!labels_path.empty()) << dir << ": missing " << labels_stem << "[.gz]";

  IdxArray images = read_idx(images_path, 3);
  const IdxArray labels = read_idx(labels_path, 1);
  FURNACE_CHECK(images.dims[0] == labels.dims[0])
      << dir << ": " << prefix << " has " << images.dims[0] << " images ("
      << fs::path(images_path).filename().string() << ") but " << labels.dims[0] << " labels ("
      << fs::path(labels_path).filename().string() << ")";
  FURNACE_CHECK(images.dims[0] > 0 && images.dims[1] > 0 && images.dims[2] > 0 &&
                images.dims[1] <= INT_MAX && images.dims[2] <= INT_MAX)
      << images_path << ": no usable images (dims " << images.dims[0] << " x " << images.dims[1] << " x "
      << images.dims[2] << ")";

  ImageDataset ds;
  ds.n = images.dims[0];
  ds.rows = static_cast<int>(images.dims[1]);
  ds.cols = static_cast<int>(images.dims[2]);
  ds.labels.resize(labels.data.size());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    const int label = labels.data[i];
    FURNACE_CHECK(label <= 9) << labels_path << ": label " << label << " at index " << i
                              << " is outside 0..9";
    ds.labels[i] = label;
  }
  ds.pixels = std::move(images.data);  // value_of starts as pixel / 255
  return ds;
}

void ImageDataset::image(int64_t index, float* out) const {
  const int64_t f = features();
  const uint8_t* p = pixels.data() + index * f;
  for (int64_t i = 0; i < f; ++i) out[i] = value_of[p[i]];
}

std::string default_fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

}  // namespace furnace
