// The bad files of the input-surface table (docs/input-surfaces.md, "Fixtures"): written into a
// folder ($FIX) before each row runs. Small on purpose: the datasets are 4 synthetic 28x28 images
// with their labels (valid IDX), with one file broken in each copy.
#pragma once

#include <sys/stat.h>  // defines: mkfifo
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace furnace::cli_test {

namespace fixtures_detail {

namespace fs = std::filesystem;

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// An unsigned-byte IDX file: magic 0x0000080<rank>, big-endian dims, then the data.
inline std::string idx(const std::vector<uint32_t>& dims, const std::string& data) {
  std::string s{'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xff);
  return s + data;
}

inline std::string gzip(const std::string& raw) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);  // 15 + 16: a gzip wrapper
  std::string out(deflateBound(&z, raw.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A dataset folder of 4 training and 4 test images; `replace` swaps one file's bytes (by name).
inline void dataset(const fs::path& dir, const std::string& replace_name = "", const std::string& bytes = "") {
  const std::string images = idx({4, 28, 28}, std::string(4 * 28 * 28, '\x40'));
  const std::string labels = idx({4}, std::string("\x01\x02\x03\x04", 4));
  for (const char* split : {"train", "t10k"}) {
    const std::string img = std::string(split) + "-images-idx3-ubyte", lab = std::string(split) + "-labels-idx1-ubyte";
    write_bytes(dir / img, img == replace_name ? bytes : images);
    write_bytes(dir / lab, lab == replace_name ? bytes : labels);
  }
}

inline std::string topology(const std::string& host_key = "pinned_gbps", const std::string& extra = "") {
  return "description = \"fixture\"\nsource = \"test\"\n[host]\n" + host_key +
         " = 25\npageable_gbps = 12\nlatency_us = 10\n"
         "[[gpu]]\nname = \"G\"\npci_bus_id = \"00000000:01:00.0\"\nmemory_mib = 1024\ncontext_mib = 100\n"
         "sm_count = 1\ncompute_capability = \"8.0\"\ntflops_fp32 = 1\ntflops_fp16 = 1\ntflops_bf16 = 1\n"
         "memory_gbps = 1\nlaunch_latency_us = 1\n" + extra;
}

}  // namespace fixtures_detail

// Writes every fixture the table names into `dir`.
inline void write_input_fixtures(const std::filesystem::path& dir) {
  using namespace fixtures_detail;
  fs::create_directories(dir);
  // Topology files.
  write_bytes(dir / "syntax.toml", "name = \"x\"\n[[gpu]\nname = 1\n");
  write_bytes(dir / "typo.toml", topology("pinned_gpbs"));
  write_bytes(dir / "no-gpu.toml", "description = \"d\"\nsource = \"s\"\n[host]\npinned_gbps = 25\n"
                                   "pageable_gbps = 12\nlatency_us = 10\n");
  write_bytes(dir / "bad-link.toml", topology("pinned_gbps", "[[link]]\na = 0\nb = 3\nkind = \"nvlink\"\ngbps = 1\nlatency_us = 1\n"));
  write_bytes(dir / "huge.toml", topology("pinned_gbps", "[[gpu]]\ncount = 1024\nname = \"G\"\n"));
  write_bytes(dir / "topologies" / "README.md", "an empty topology folder\n");
  // Datasets.
  dataset(dir / "data-ok");
  dataset(dir / "data-not-idx", "train-images-idx3-ubyte", "GARBAGE!garbage");
  dataset(dir / "data-truncated", "train-images-idx3-ubyte", idx({4, 28, 28}, "short"));
  dataset(dir / "data-trailing", "train-labels-idx1-ubyte", idx({4}, "\x01\x02\x03\x04\x05"));
  dataset(dir / "data-rank", "train-images-idx3-ubyte", idx({4}, "\x01\x02\x03\x04"));
  dataset(dir / "data-label", "train-labels-idx1-ubyte", idx({4}, "\x01\x02\x03\x0a"));
  dataset(dir / "data-count", "train-labels-idx1-ubyte", idx({3}, "\x01\x02\x03"));
  dataset(dir / "data-gzip");  // the .gz is preferred over the raw file: a corrupt deflate stream
  std::string gz = gzip(idx({4, 28, 28}, std::string(4 * 28 * 28, 'x')));
  gz[10] = '\xff';  // the first deflate block header: an invalid block type
  write_bytes(dir / "data-gzip" / "train-images-idx3-ubyte.gz", gz);
  fs::create_directories(dir / "data-empty");
  // A lessons folder with one broken lesson.toml (lessons/FORMAT.md).
  write_bytes(dir / "lessons" / "01-bad" / "lesson.toml", "title = [\n");
  fs::create_directories(dir / "lessons-empty");
  // Trace files.
  write_bytes(dir / "not-json.json", "{\"traceEvents\": [\n");
  write_bytes(dir / "not-trace.json", "{\"events\": []}\n");
  write_bytes(dir / "no-events.json", "{\"traceEvents\": [{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0}]}\n");
  // Files too big to read whole, sparse (no disk space): a topology over 4 MiB, a trace over 512 MiB.
  write_bytes(dir / "big.toml", "");
  fs::resize_file(dir / "big.toml", 5u << 20);
  write_bytes(dir / "big.json", "");
  fs::resize_file(dir / "big.json", 513u << 20);
  // A FIFO where a file is expected: reading it waits for a writer that never comes, and writing
  // by rename would replace it (a device such as /dev/null, when run as root). As a checkpoint, a
  // trace, a dataset file and a lesson.toml.
  ::mkfifo((dir / "fifo").c_str(), 0644);
  dataset(dir / "data-fifo");
  fs::remove(dir / "data-fifo" / "train-images-idx3-ubyte");
  ::mkfifo((dir / "data-fifo" / "train-images-idx3-ubyte").c_str(), 0644);
  fs::create_directories(dir / "lessons-fifo" / "01-fifo");
  ::mkfifo((dir / "lessons-fifo" / "01-fifo" / "lesson.toml").c_str(), 0644);
}

}  // namespace furnace::cli_test
