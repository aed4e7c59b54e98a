// The checkpoint container (docs/checkpoint-format.md): bytes in and out, the atomic write, and a
// reader that checks every size it reads against the bytes that are really there before using
// it (the file may be truncated, corrupt or hostile; tests/fuzz/fuzz_checkpoint.cpp feeds it
// garbage). Layout, little-endian:
//   "FURNCKPT" | u32 version | u32 section count | sections... | u32 CRC32 of all bytes before it
//   section:      u32 name length | name | u64 payload length | payload
//   tensor table: u32 count | per tensor: u32 name length | name | u32 ndim | i64 dims[ndim] |
//                 f32 values[prod(dims)]
// Sections: "meta" (JSON: train/checkpoint_meta.cpp), "model" and "optimizer" (tensor tables).
// Not here: what the metadata means, or the training loop.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "furnace/atomic_file.h"  // defines: write_file_atomically
#include "furnace/checkpoint.h"
#include "furnace/error.h"
#include "furnace/file_kind.h"  // defines: is_special_file
#include "train/checkpoint_meta.h"  // defines: checkpoint_meta_json, parse_checkpoint_meta

namespace furnace {
namespace {

constexpr char kMagic[8] = {'F', 'U', 'R', 'N', 'C', 'K', 'P', 'T'};
constexpr uint32_t kMaxSections = 64;
constexpr uint32_t kMaxSectionName = 64;
constexpr uint32_t kMaxTensorName = 1024;
constexpr uint32_t kMaxDims = 8;

uint32_t crc32_of(const uint8_t* data, size_t size) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (size > 0) {  // zlib takes a 32-bit length
    const uInt n = static_cast<uInt>(std::min<size_t>(size, size_t{1} << 30));
    crc = ::crc32(crc, data, n);
    data += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

// ---- writing ----------------------------------------------------------------------------------

class Writer {
 public:
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void text(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  std::vector<uint8_t> out;
};

std::vector<uint8_t> tensor_table(const std::vector<StateTensor>& tensors) {
  Writer w;
  w.u32(static_cast<uint32_t>(tensors.size()));
  for (const StateTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    FURNACE_ASSERT(t.values.size() == numel)
        << "state tensor " << t.name << " has " << t.values.size() << " values for shape "
        << shape_text(t.shape);
    w.text(t.name);
    w.u32(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) w.u64(static_cast<uint64_t>(d));
    for (float v : t.values) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      w.u32(bits);
    }
  }
  return std::move(w.out);
}

// ---- reading ----------------------------------------------------------------------------------

// A cursor over untrusted bytes: every read checks what is left first.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, std::string origin, std::string where)
      : p_(data), size_(size), origin_(std::move(origin)), where_(std::move(where)) {}

  size_t left() const { return size_ - pos_; }
  size_t pos() const { return pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    FURNACE_FAIL() << "checkpoint " << origin_ << ": " << where_ << what;
  }
  void need(size_t n, const char* what) const {
    if (n > left())
      fail(std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes at offset " +
           std::to_string(pos_) + ", only " + std::to_string(left()) + " left");
  }
  uint32_t u32(const char* what) {
    need(4, what);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p_[pos_ + i]) << (8 * i);
    pos_ += 4;
    return v;
  }
  uint64_t u64(const char* what) {
    need(8, what);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p_[pos_ + i]) << (8 * i);
    pos_ += 8;
    return v;
  }
  const uint8_t* take(size_t n, const char* what) {
    need(n, what);
    const uint8_t* at = p_ + pos_;
    pos_ += n;
    return at;
  }
  // A name: 1..max_len printable ASCII characters (names end up in one-line messages).
  std::string name(uint32_t max_len, const char* what) {
    const uint32_t n = u32(what);
    if (n == 0 || n > max_len)
      fail(std::string(what) + " length " + std::to_string(n) + " is out of range 1.." + std::to_string(max_len));
    const uint8_t* b = take(n, what);
    std::string s(reinterpret_cast<const char*>(b), n);
    for (unsigned char c : s)
      if (c < 0x20 || c >= 0x7f) fail(std::string(what) + " contains a non-printable byte");
    return s;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  std::string origin_, where_;
};

std::vector<StateTensor> parse_tensor_table(const uint8_t* data, size_t size, const std::string& origin,
                                            const std::string& section) {
  Reader r(data, size, origin, "section '" + section + "': ");
  const uint32_t count = r.u32("tensor count");
  // Each entry takes at least 13 bytes (name length, one name byte, ndim, one value): a count
  // larger than that allows is corrupt, whatever it claims.
  if (count > r.left() / 13 + 1)
    r.fail(std::to_string(count) + " tensors cannot fit in " + std::to_string(size) + " bytes");
  std::vector<StateTensor> out;
  out.reserve(count);
  std::set<std::string> seen;
  for (uint32_t i = 0; i < count; ++i) {
    StateTensor t;
    t.name = r.name(kMaxTensorName, "tensor name");
    if (!seen.insert(t.name).second) r.fail("tensor '" + t.name + "' appears twice");
    const uint32_t ndim = r.u32("tensor rank");
    if (ndim > kMaxDims) r.fail("tensor '" + t.name + "' has rank " + std::to_string(ndim) + " (at most 8)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < ndim; ++d) {
      const uint64_t dim = r.u64("tensor dimension");
      if (dim > static_cast<uint64_t>(INT64_MAX)) r.fail("tensor '" + t.name + "' has a negative dimension");
      t.shape.push_back(static_cast<int64_t>(dim));
      // numel * 4 must fit in what is left: check before multiplying (no overflow).
      if (dim != 0 && numel > r.left() / 4 / dim)
        r.fail("truncated: tensor '" + t.name + "' of shape " + shape_text(t.shape) +
               "... needs more than the " + std::to_string(r.left()) + " bytes left");
      numel *= dim;
    }
    const uint8_t* values = r.take(static_cast<size_t>(numel) * 4, "tensor values");
    t.values.resize(static_cast<size_t>(numel));
    for (size_t k = 0; k < t.values.size(); ++k) {
      const uint8_t* b = values + 4 * k;
      const uint32_t bits = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
                            static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
      std::memcpy(&t.values[k], &bits, 4);
    }
    out.push_back(std::move(t));
  }
  if (r.left() != 0) r.fail(std::to_string(r.left()) + " stray bytes after the last tensor");
  return out;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::vector<uint8_t> serialize_checkpoint(const Checkpoint& ck) {
  const std::string meta = checkpoint_meta_json(ck);
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> sections = {
      {"meta", std::vector<uint8_t>(meta.begin(), meta.end())},
      {"model", tensor_table(ck.model)},
      {"optimizer", tensor_table(ck.optimizer_state)}};
  Writer w;
  w.bytes(kMagic, sizeof kMagic);
  w.u32(kCheckpointVersion);
  w.u32(static_cast<uint32_t>(sections.size()));
  for (const auto& [name, payload] : sections) {
    w.text(name);
    w.u64(payload.size());
    w.bytes(payload.data(), payload.size());
  }
  w.u32(crc32_of(w.out.data(), w.out.size()));
  return std::move(w.out);
}

Checkpoint parse_checkpoint(const uint8_t* data, size_t size, const std::string& origin) {
  Reader r(data, size, origin, "");
  if (size < sizeof kMagic) {
    if (size > 0 && std::memcmp(data, kMagic, size) == 0) r.fail("truncated: " + std::to_string(size) + " bytes");
    r.fail("not a Furnace checkpoint (" + std::to_string(size) + " bytes, no FURNCKPT magic)");
  }
  if (std::memcmp(r.take(sizeof kMagic, "magic"), kMagic, sizeof kMagic) != 0)
    r.fail("not a Furnace checkpoint (it does not start with FURNCKPT)");
  const uint32_t version = r.u32("version");
  if (version != kCheckpointVersion)
    r.fail("version " + std::to_string(version) + " is not supported (this furnace reads version " +
           std::to_string(kCheckpointVersion) + ")");
  const uint32_t count = r.u32("section count");
  if (count > kMaxSections) r.fail(std::to_string(count) + " sections (at most 64): corrupt header");

  // Walk the sections (sizes checked against what is there), then the checksum, then the
  // contents: a truncated file says "truncated", a bit flip says "checksum mismatch".
  std::map<std::string, std::pair<const uint8_t*, size_t>> sections;
  for (uint32_t i = 0; i < count; ++i) {
    const std::string name = r.name(kMaxSectionName, "section name");
    const uint64_t n = r.u64("section length");
    if (n > r.left())
      r.fail("truncated: section '" + name + "' needs " + std::to_string(n) + " bytes at offset " +
             std::to_string(r.pos()) + ", only " + std::to_string(r.left()) + " left");
    const uint8_t* payload = r.take(static_cast<size_t>(n), "section");
    if (!sections.emplace(name, std::make_pair(payload, static_cast<size_t>(n))).second)
      r.fail("section '" + name + "' appears twice");
  }
  if (r.left() < 4) r.fail("truncated: the checksum needs 4 bytes, " + std::to_string(r.left()) + " left");
  if (r.left() > 4) r.fail(std::to_string(r.left() - 4) + " unexpected bytes after the last section");
  const uint32_t stored = r.u32("checksum");
  const uint32_t computed = crc32_of(data, size - 4);
  if (stored != computed) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "checksum mismatch (CRC32 stored %08x, computed %08x): the file is corrupt",
                  stored, computed);
    r.fail(buf);
  }
  for (const char* required : {"meta", "model", "optimizer"})
    if (!sections.count(required)) r.fail(std::string("section '") + required + "' is missing");

  Checkpoint ck;
  ck.model = parse_tensor_table(sections["model"].first, sections["model"].second, origin, "model");
  ck.optimizer_state = parse_tensor_table(sections["optimizer"].first, sections["optimizer"].second, origin, "optimizer");
  const auto& [meta, meta_size] = sections["meta"];
  parse_checkpoint_meta(std::string(reinterpret_cast<const char*>(meta), meta_size), ck, origin);
  return ck;
}

Checkpoint read_checkpoint(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (fstat below turns it away).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FURNACE_CHECK(fd >= 0) << "checkpoint " << path << ": cannot open: " << errno_text();
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    FURNACE_FAIL() << "checkpoint " << path << ": not a regular file";
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? errno_text() : "the file shrank while reading";
      ::close(fd);
      FURNACE_FAIL() << "checkpoint " << path << ": cannot read: " << why;
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return parse_checkpoint(bytes.data(), bytes.size(), path);
}

size_t save_checkpoint(const Checkpoint& ck, const std::string& path) {
  FURNACE_CHECK(!is_special_file(path))
      << "cannot save checkpoint " << printable(path) << ": it exists and is not a regular file";
  const std::vector<uint8_t> bytes = serialize_checkpoint(ck);
  write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                        "cannot save checkpoint " + printable(path));
  return bytes.size();
}

}  // namespace furnace
