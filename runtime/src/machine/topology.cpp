// topology.cpp: reads a machine description (data/topologies/*.toml) into furnace::Topology and
// answers questions about it (peak FLOP/s per dtype, the link between two GPUs). It does not
// discover real hardware; that lives with the CUDA backend. The only file that includes toml++.
//
// Schema (data/topologies/README.md says the same with examples). Every key below is checked; an
// unknown key is an error so a typo never passes silently. Units in the file are the ones vendors
// print; the struct holds SI units (bytes, bytes/s, FLOP/s, seconds). 1 GB = 1e9 bytes,
// 1 MiB = 2^20 bytes, 1 TFLOPS = 1e12 FLOP/s.
//
//   name        = "dgx-h100"   optional string, defaults to the file's stem
//   description = "..."        required string
//   source      = "..."        required string: the documents the figures come from
//
//   [host]                     required
//   pinned_gbps   = 25         GB/s host<->device from pinned memory, one direction
//   pageable_gbps = 12.5       GB/s from pageable memory
//   latency_us    = 10         per copy
//
//   [[gpu]]                    one or more, in PCI bus order (= nvidia-smi order)
//   count              = 8     optional integer (default 1): this entry stands for `count` GPUs (1024 in all at most)
//   name               = "NVIDIA H100 80GB HBM3"
//   pci_bus_id         = "00000000:18:00.0"        string; with count > 1 an array of count strings
//   uuid               = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"   optional, same rule as
//                        pci_bus_id; when left out it is generated from the topology name, GPU name
//                        and PCI bus id (a stable hash, printed lower-case like nvidia-smi)
//   memory_mib         = 81559 integer, total memory as nvidia-smi prints it
//   context_mib        = 500   integer, modelled CUDA context per process (< memory_mib)
//   sm_count           = 132   integer
//   compute_capability = "9.0" string "major.minor"
//   tflops_fp32        = 67    FP32, non-tensor
//   tflops_fp16        = 989.4 FP16 tensor core, FP32 accumulate, dense (no sparsity)
//   tflops_bf16        = 989.4 BF16 tensor core, FP32 accumulate, dense
//   memory_gbps        = 3350  device memory bandwidth, GB/s
//   launch_latency_us  = 5     per kernel launch
//
//   [[link]]                   zero or more direct GPU<->GPU paths
//   a = 0, b = 1               GPU indices (0-based, expanded order), or instead
//   all = true                 every pair of GPUs (a fully connected NVSwitch fabric)
//   kind       = "nvlink"      "pcie" | "nvlink"
//   gbps       = 450           GB/s, one direction
//   latency_us = 2
//
// Pairs with no [[link]] talk over PCIe through the host (Topology::link_between).
// Every problem is thrown as one furnace::Error line: "<file>:<line>: gpu 2: missing 'memory_mib'".

#include "furnace/topology.h"  // defines: Topology, GpuSpec, LinkSpec, HostLinkSpec

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>

#include <toml++/toml.h>  // defines: toml::parse, toml::table, toml::node, toml::parse_error

#include "furnace/error.h"  // defines: FURNACE_CHECK, FURNACE_FAIL, printable
#include "furnace/file_kind.h"  // defines: too_big_to_read, is_special_file
#include "furnace/toml_reader.h"  // defines: toml_ascii, toml_type_name, nearest_name

#ifndef FURNACE_DEFAULT_DATA_DIR
#define FURNACE_DEFAULT_DATA_DIR "data"  // CMake passes the real one; this is for ad-hoc builds
#endif

namespace furnace {
namespace {

constexpr double kGB = 1e9;
constexpr double kTFLOPS = 1e12;
constexpr double kMicrosecond = 1e-6;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr int64_t kMaxGpus = 1024;  // per file: far beyond any machine, small enough for links

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// "00000000:1B:00.0" (domain:bus:device.function), returned upper-case like nvidia-smi prints it.
std::optional<std::string> normalize_pci_bus_id(std::string s) {
  static constexpr std::string_view kPattern = "XXXXXXXX:XX:XX.X";
  if (s.size() != kPattern.size()) return std::nullopt;
  for (size_t i = 0; i < s.size(); ++i) {
    if (kPattern[i] == 'X' ? !is_hex(s[i]) : s[i] != kPattern[i]) return std::nullopt;
    s[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[i])));
  }
  return s;
}

// "GPU-" + 8-4-4-4-12 hex digits, returned lower-case like nvidia-smi prints it.
std::optional<std::string> normalize_uuid(std::string s) {
  static constexpr std::string_view kPattern = "GPU-XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX";
  if (s.size() != kPattern.size()) return std::nullopt;
  for (size_t i = 0; i < s.size(); ++i) {
    if (kPattern[i] == 'X') {
      if (!is_hex(s[i])) return std::nullopt;
      s[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    } else if (s[i] != kPattern[i]) {
      return std::nullopt;
    }
  }
  return s;
}

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A stable, real-looking UUID for a GPU whose file gives none.
std::string generated_uuid(const std::string& seed) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the seed
  for (unsigned char c : seed) h = (h ^ c) * 0x100000001b3ull;
  uint64_t hi = mix64(h), lo = mix64(h ^ 0x5bd1e9955bd1e995ull);
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xffff), static_cast<unsigned>(hi & 0xffff),
                static_cast<unsigned>(lo >> 48),
                static_cast<unsigned long long>(lo & 0xffffffffffffull));
  return buf;
}

// One TOML table being read: every problem names the file, the line and what the table is
// ("gpu 2", "link 0", "[host]"; empty for the top level).
class Fields {
 public:
  Fields(const toml::table& t, const std::string& origin, std::string what)
      : t_(t), origin_(origin), what_(std::move(what)) {}

  // "<origin>:<line>: <what>: " for a node (line omitted when unknown).
  std::string at(const toml::node* n) const {
    std::ostringstream os;
    os << origin_;
    if (n && n->source().begin.line > 0) os << ':' << n->source().begin.line;
    os << ": ";
    if (!what_.empty()) os << what_ << ": ";
    return os.str();
  }
  // Problems with the table as a whole point at its header line; the top level has none.
  std::string here() const { return at(what_.empty() ? nullptr : &t_); }

  [[noreturn]] void fail(const toml::node* n, const std::string& message) const {
    FURNACE_FAIL() << at(n) << message;
    std::abort();  // unreachable: FURNACE_FAIL throws
  }

  // Rejects keys outside `allowed`, suggesting the nearest allowed key for a likely typo.
  void only(std::initializer_list<std::string_view> allowed) const {
    for (auto&& [key, node] : t_) {
      std::string_view k = key.str();
      if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
      const std::string best = nearest_name(k, allowed);
      std::ostringstream os;
      os << "unknown key '" << printable(k) << "'";
      if (!best.empty()) {
        os << " (did you mean '" << best << "'?)";
      } else {
        os << " (allowed:";
        for (std::string_view a : allowed) os << ' ' << a;
        os << ')';
      }
      fail(&node, os.str());
    }
  }

  const toml::node* find(std::string_view key) const { return t_.get(key); }

  const toml::node& need(std::string_view key) const {
    const toml::node* n = find(key);
    if (!n) fail(what_.empty() ? nullptr : &t_, "missing '" + std::string(key) + "'");
    return *n;
  }

  std::string string(std::string_view key) const {
    const toml::node& n = need(key);
    return string_of(n, key);
  }
  std::optional<std::string> optional_string(std::string_view key) const {
    const toml::node* n = find(key);
    if (!n) return std::nullopt;
    return string_of(*n, key);
  }
  std::string string_of(const toml::node& n, std::string_view key) const {
    if (!n.is_string()) fail(&n, "'" + std::string(key) + "' must be a string, got " + toml_type_name(n));
    std::string s = n.as_string()->get();
    if (s.empty()) fail(&n, "'" + std::string(key) + "' must not be empty");
    size_t len = 0;
    const size_t bad = find_terminal_control(s, &len);
    if (bad != std::string::npos)
      fail(&n, "'" + std::string(key) + "' contains a terminal control character (" + printable(s.substr(bad, len)) +
                   " at byte " + std::to_string(bad + 1) + "); these strings are printed as they are");
    return s;
  }

  // An integer in [1, max].
  int64_t positive_integer(std::string_view key, int64_t max) const {
    const toml::node& n = need(key);
    if (!n.is_integer())
      fail(&n, "'" + std::string(key) + "' must be an integer, got " + toml_type_name(n));
    int64_t v = n.as_integer()->get();
    if (v <= 0) fail(&n, "'" + std::string(key) + "' must be positive, got " + std::to_string(v));
    if (v > max)
      fail(&n, "'" + std::string(key) + "' = " + std::to_string(v) + " is too large (at most " +
                   std::to_string(max) + ")");
    return v;
  }

  // A finite number > 0; integers are accepted ("gbps = 25").
  double positive_number(std::string_view key) const {
    const toml::node& n = need(key);
    double v = 0;
    if (n.is_integer()) {
      v = static_cast<double>(n.as_integer()->get());
    } else if (n.is_floating_point()) {
      v = n.as_floating_point()->get();
    } else {
      fail(&n, "'" + std::string(key) + "' must be a number, got " + toml_type_name(n));
    }
    if (!(v > 0) || !std::isfinite(v)) {
      std::ostringstream os;
      os << "'" << key << "' must be a positive finite number, got " << v;
      fail(&n, os.str());
    }
    return v;
  }

  // A string, or an array of exactly `count` strings; nullopt when the key is absent and optional.
  std::optional<std::vector<std::string>> strings(std::string_view key, int64_t count,
                                                  bool required) const {
    const toml::node* n = required ? &need(key) : find(key);
    if (!n) return std::nullopt;
    std::vector<std::string> out;
    if (const toml::array* arr = n->as_array()) {
      if (static_cast<int64_t>(arr->size()) != count)
        fail(n, "'" + std::string(key) + "' has " + std::to_string(arr->size()) +
                    " entries but count = " + std::to_string(count));
      for (const toml::node& e : *arr) out.push_back(string_of(e, key));
    } else if (count == 1) {
      out.push_back(string_of(*n, key));
    } else {
      fail(n, "'" + std::string(key) + "' must be an array of " + std::to_string(count) +
                  " strings when count = " + std::to_string(count) + ", got " + toml_type_name(*n));
    }
    return out;
  }

 private:
  const toml::table& t_;
  const std::string& origin_;
  std::string what_;
};

// The value of an array-of-tables key ([[gpu]], [[link]]); empty when absent.
std::vector<const toml::table*> tables_of(const Fields& top, std::string_view key) {
  std::vector<const toml::table*> out;
  const toml::node* n = top.find(key);
  if (!n) return out;
  const toml::array* arr = n->as_array();
  if (!arr)
    top.fail(n, "'" + std::string(key) + "' must be an array of tables ([[" + std::string(key) +
                    "]]), got " + toml_type_name(*n));
  for (const toml::node& e : *arr) {
    if (!e.is_table())
      top.fail(&e, "'" + std::string(key) + "' must be an array of tables ([[" + std::string(key) +
                       "]]), found " + toml_type_name(e) + " in it");
    out.push_back(e.as_table());
  }
  return out;
}

HostLinkSpec parse_host(const Fields& top, const std::string& origin) {
  const toml::node* n = top.find("host");
  if (!n) top.fail(nullptr, "missing [host] table");
  if (!n->is_table()) top.fail(n, "'host' must be a table ([host]), got " + toml_type_name(*n));
  Fields f(*n->as_table(), origin, "[host]");
  f.only({"pinned_gbps", "pageable_gbps", "latency_us"});
  HostLinkSpec h;
  h.pinned_bandwidth = f.positive_number("pinned_gbps") * kGB;
  h.pageable_bandwidth = f.positive_number("pageable_gbps") * kGB;
  h.latency_s = f.positive_number("latency_us") * kMicrosecond;
  return h;
}

struct ParsedGpu {
  GpuSpec spec;
  const toml::table* table;  // for error lines
};

void parse_gpu_entry(const toml::table& t, const std::string& origin, const std::string& topo_name,
                     std::vector<ParsedGpu>& gpus) {
  const int first = static_cast<int>(gpus.size());
  Fields f0(t, origin, "gpu " + std::to_string(first));
  f0.only({"count", "name", "uuid", "pci_bus_id", "memory_mib", "context_mib", "sm_count",
           "compute_capability", "tflops_fp32", "tflops_fp16", "tflops_bf16", "memory_gbps",
           "launch_latency_us"});
  const int64_t count = f0.find("count") ? f0.positive_integer("count", kMaxGpus) : 1;
  // The links table is quadratic in the GPU count: bound the machine, not just one entry.
  if (first + count > kMaxGpus)
    f0.fail(&t, "a machine has at most " + std::to_string(kMaxGpus) + " GPUs (this entry brings it to " +
                    std::to_string(first + count) + ")");
  const Fields f(t, origin,
                 count == 1 ? "gpu " + std::to_string(first)
                            : "gpus " + std::to_string(first) + "-" +
                                  std::to_string(first + count - 1));

  GpuSpec g;
  g.name = f.string("name");
  const int64_t memory_mib = f.positive_integer("memory_mib", int64_t{1} << 30);
  const int64_t context_mib = f.positive_integer("context_mib", int64_t{1} << 30);
  if (context_mib >= memory_mib)
    f.fail(f.find("context_mib"), "'context_mib' (" + std::to_string(context_mib) +
                                      ") must be less than 'memory_mib' (" +
                                      std::to_string(memory_mib) + ")");
  g.memory_bytes = static_cast<uint64_t>(memory_mib) * kMiB;
  g.context_bytes = static_cast<uint64_t>(context_mib) * kMiB;
  g.sm_count = static_cast<int>(f.positive_integer("sm_count", std::numeric_limits<int>::max()));

  const std::string cc = f.string("compute_capability");
  {
    int major = -1, minor = -1;
    size_t dot = cc.find('.');
    bool ok = dot != std::string::npos && dot > 0 && dot + 1 < cc.size() && dot <= 2 &&
              cc.size() - dot - 1 <= 2 &&
              std::all_of(cc.begin(), cc.end(), [](char c) { return c == '.' || std::isdigit(static_cast<unsigned char>(c)); }) &&
              std::count(cc.begin(), cc.end(), '.') == 1;
    if (ok) {
      major = std::stoi(cc.substr(0, dot));
      minor = std::stoi(cc.substr(dot + 1));
    }
    if (!ok || major <= 0)
      f.fail(f.find("compute_capability"),
             "'compute_capability' must look like \"8.6\", got \"" + printable(cc) + "\"");
    g.compute_capability_major = major;
    g.compute_capability_minor = minor;
  }

  g.peak_flops_f32 = f.positive_number("tflops_fp32") * kTFLOPS;
  g.peak_flops_f16 = f.positive_number("tflops_fp16") * kTFLOPS;
  g.peak_flops_bf16 = f.positive_number("tflops_bf16") * kTFLOPS;
  g.memory_bandwidth = f.positive_number("memory_gbps") * kGB;
  g.launch_latency_s = f.positive_number("launch_latency_us") * kMicrosecond;

  const std::vector<std::string> pci = *f.strings("pci_bus_id", count, /*required=*/true);
  const std::optional<std::vector<std::string>> uuids = f.strings("uuid", count, false);
  for (int64_t i = 0; i < count; ++i) {
    const int index = first + static_cast<int>(i);
    const Fields fi(t, origin, "gpu " + std::to_string(index));
    ParsedGpu p{g, &t};
    std::optional<std::string> bus = normalize_pci_bus_id(pci[i]);
    if (!bus)
      fi.fail(fi.find("pci_bus_id"), "'pci_bus_id' must look like \"00000000:1B:00.0\", got \"" +
                                         printable(pci[i]) + "\"");
    p.spec.pci_bus_id = *bus;
    if (uuids) {
      std::optional<std::string> u = normalize_uuid((*uuids)[i]);
      if (!u)
        fi.fail(fi.find("uuid"),
                "'uuid' must look like \"GPU-1a2b3c4d-0000-1111-2222-333344445555\", got \"" +
                    printable((*uuids)[i]) + "\"");
      p.spec.uuid = *u;
    } else {
      p.spec.uuid = generated_uuid(topo_name + "|" + g.name + "|" + p.spec.pci_bus_id);
    }
    gpus.push_back(std::move(p));
  }
}

// Unique UUIDs and PCI bus ids, listed in increasing PCI bus order.
void check_gpu_identity(const std::vector<ParsedGpu>& gpus, const std::string& origin) {
  for (size_t i = 0; i < gpus.size(); ++i) {
    const Fields fi(*gpus[i].table, origin, "gpu " + std::to_string(i));
    for (size_t j = 0; j < i; ++j) {
      // Bus ids first: a generated UUID repeats exactly when its bus id does.
      if (gpus[i].spec.pci_bus_id == gpus[j].spec.pci_bus_id)
        fi.fail(gpus[i].table, "duplicate pci_bus_id '" + gpus[i].spec.pci_bus_id +
                                   "' (also gpu " + std::to_string(j) + ")");
      if (gpus[i].spec.uuid == gpus[j].spec.uuid)
        fi.fail(gpus[i].table, "duplicate uuid '" + gpus[i].spec.uuid + "' (also gpu " +
                                   std::to_string(j) + ")");
    }
    // Fixed-width upper-case hex: string order is numeric order.
    if (i > 0 && gpus[i].spec.pci_bus_id < gpus[i - 1].spec.pci_bus_id)
      fi.fail(gpus[i].table, "pci_bus_id '" + gpus[i].spec.pci_bus_id + "' comes before gpu " +
                                 std::to_string(i - 1) + "'s '" + gpus[i - 1].spec.pci_bus_id +
                                 "' (list GPUs in PCI bus order, as nvidia-smi does)");
  }
}

std::vector<LinkSpec> parse_links(const Fields& top, const std::string& origin, int n_gpus) {
  std::vector<LinkSpec> links;
  std::vector<int> link_of_pair(static_cast<size_t>(n_gpus) * n_gpus, -1);  // entry that joined a pair
  int entry = 0;
  for (const toml::table* t : tables_of(top, "link")) {
    const Fields f(*t, origin, "link " + std::to_string(entry));
    f.only({"a", "b", "all", "kind", "gbps", "latency_us"});
    LinkSpec proto;
    const std::string kind = f.string("kind");
    if (kind == "pcie") {
      proto.kind = LinkKind::pcie;
    } else if (kind == "nvlink") {
      proto.kind = LinkKind::nvlink;
    } else {
      f.fail(f.find("kind"), "unknown link kind '" + printable(kind) + "' (expected \"pcie\" or \"nvlink\")");
    }
    proto.bandwidth = f.positive_number("gbps") * kGB;
    proto.latency_s = f.positive_number("latency_us") * kMicrosecond;

    std::vector<std::pair<int, int>> pairs;
    if (const toml::node* all = f.find("all")) {
      if (!all->is_boolean()) f.fail(all, "'all' must be a boolean, got " + toml_type_name(*all));
      if (!all->as_boolean()->get()) f.fail(all, "'all' must be true when given (or use 'a' and 'b')");
      if (f.find("a") || f.find("b"))
        f.fail(all, "use either 'all = true' or 'a' and 'b', not both");
      for (int a = 0; a < n_gpus; ++a)
        for (int b = a + 1; b < n_gpus; ++b) pairs.emplace_back(a, b);
    } else {
      int ends[2];
      const char* names[2] = {"a", "b"};
      for (int k = 0; k < 2; ++k) {
        const toml::node& n = f.need(names[k]);
        if (!n.is_integer())
          f.fail(&n, std::string("'") + names[k] + "' must be an integer, got " + toml_type_name(n));
        int64_t v = n.as_integer()->get();
        if (v < 0 || v >= n_gpus)
          f.fail(&n, std::string("'") + names[k] + "' = " + std::to_string(v) +
                         " is out of range (the file has " + std::to_string(n_gpus) +
                         " GPUs, 0.." + std::to_string(n_gpus - 1) + ")");
        ends[k] = static_cast<int>(v);
      }
      if (ends[0] == ends[1])
        f.fail(t, "'a' and 'b' are both " + std::to_string(ends[0]) +
                      " (a link joins two different GPUs)");
      pairs.emplace_back(ends[0], ends[1]);
    }
    for (auto [a, b] : pairs) {
      int& seen = link_of_pair[static_cast<size_t>(std::min(a, b)) * n_gpus + std::max(a, b)];
      if (seen >= 0)
        f.fail(t, "GPUs " + std::to_string(a) + " and " + std::to_string(b) +
                      " are already joined by link " + std::to_string(seen));
      seen = entry;
      LinkSpec l = proto;
      l.a = a;
      l.b = b;
      links.push_back(l);
    }
    ++entry;
  }
  return links;
}

std::string read_file(const std::filesystem::path& path) {
  // The largest machine (1024 GPUs, each with links) is far below this.
  const std::string too_big = too_big_to_read(path, 4u << 20);
  FURNACE_CHECK(too_big.empty()) << "topology file '" << printable(path.string()) << "': " << too_big;
  std::ifstream in(path, std::ios::binary);
  FURNACE_CHECK(in.good()) << "cannot open topology file '" << path.string() << "'";
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

// ---- GpuSpec / Topology ---------------------------------------------------------------------

double GpuSpec::peak_flops(DType t) const {
  switch (t) {
    case DType::f16: return peak_flops_f16;
    case DType::bf16: return peak_flops_bf16;
    default: return peak_flops_f32;
  }
}

LinkSpec Topology::link_between(int a, int b) const {
  const int n = static_cast<int>(gpus.size());
  FURNACE_CHECK(a >= 0 && a < n && b >= 0 && b < n)
      << "topology '" << name << "': no link between GPUs " << a << " and " << b << " (it has "
      << n << (n == 1 ? " GPU)" : " GPUs)");
  if (a == b) {
    const GpuSpec& g = gpus[static_cast<size_t>(a)];
    return LinkSpec{a, b, LinkKind::local, g.memory_bandwidth, g.launch_latency_s};
  }
  for (const LinkSpec& l : links)
    if ((l.a == a && l.b == b) || (l.a == b && l.b == a)) {
      LinkSpec out = l;
      out.a = a;
      out.b = b;
      return out;
    }
  return LinkSpec{a, b, LinkKind::pcie, host.pinned_bandwidth, host.latency_s};
}

LinkKind parse_link_kind(const std::string& s) {
  if (s == "pcie") return LinkKind::pcie;
  if (s == "nvlink") return LinkKind::nvlink;
  FURNACE_FAIL() << "unknown link kind '" << printable(s) << "' (expected \"pcie\" or \"nvlink\")";
  return LinkKind::pcie;  // unreachable
}

const char* link_kind_name(LinkKind k) {
  switch (k) {
    case LinkKind::pcie: return "pcie";
    case LinkKind::nvlink: return "nvlink";
    case LinkKind::local: return "local";
  }
  return "?";
}

// ---- Parsing and loading --------------------------------------------------------------------

Topology parse_topology(const std::string& toml_text, const std::string& origin) {
  const std::string ascii = toml_ascii(toml_text, origin);  // what Debian's toml++ 3.3.0 parses safely
  toml::table root;
  try {
    root = toml::parse(ascii, origin);
  } catch (const toml::parse_error& e) {
    FURNACE_FAIL() << origin << ':' << e.source().begin.line << ':' << e.source().begin.column
                   << ": TOML syntax error: " << printable(e.description());  // one line: it quotes the input
  }

  const Fields top(root, origin, "");
  top.only({"name", "description", "source", "host", "gpu", "link"});

  Topology topo;
  if (top.find("name")) {
    topo.name = top.string("name");
  } else {
    topo.name = std::filesystem::path(origin).stem().string();
  }
  topo.description = top.string("description");
  topo.source = top.string("source");
  topo.host = parse_host(top, origin);

  std::vector<ParsedGpu> gpus;
  for (const toml::table* t : tables_of(top, "gpu")) parse_gpu_entry(*t, origin, topo.name, gpus);
  FURNACE_CHECK(!gpus.empty()) << origin << ": no GPUs (add at least one [[gpu]] table)";
  check_gpu_identity(gpus, origin);
  for (ParsedGpu& p : gpus) topo.gpus.push_back(std::move(p.spec));

  topo.links = parse_links(top, origin, static_cast<int>(topo.gpus.size()));
  return topo;
}

std::string topology_dir() {
  if (const char* d = std::getenv("FURNACE_TOPOLOGY_DIR"); d && *d) return d;
  if (const char* d = std::getenv("FURNACE_DATA_DIR"); d && *d) return std::string(d) + "/topologies";
  return std::string(FURNACE_DEFAULT_DATA_DIR) + "/topologies";
}

std::vector<std::string> list_topologies() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(topology_dir(), ec)) {
    if (entry.path().extension() == ".toml" && entry.is_regular_file(ec))
      names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Topology load_topology(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (name_or_path.find('/') != std::string::npos || ends_with(name_or_path, ".toml")) {
    FURNACE_CHECK(!is_special_file(name_or_path))
        << "topology file '" << printable(name_or_path) << "': not a regular file";
    FURNACE_CHECK(fs::is_regular_file(name_or_path, ec))
        << "topology file '" << printable(name_or_path) << "' not found";
    return parse_topology(read_file(name_or_path), name_or_path);
  }
  const std::string dir = topology_dir();
  const fs::path path = fs::path(dir) / (name_or_path + ".toml");
  if (!name_or_path.empty() && fs::is_regular_file(path, ec))
    return parse_topology(read_file(path), path.string());

  FURNACE_CHECK(fs::is_directory(dir, ec))
      << "unknown topology '" << printable(name_or_path) << "': the topology directory '" << printable(dir)
      << "' does not exist (set FURNACE_TOPOLOGY_DIR or FURNACE_DATA_DIR)";
  std::ostringstream known;
  const std::vector<std::string> names = list_topologies();
  for (size_t i = 0; i < names.size(); ++i) known << (i ? ", " : "") << names[i];
  FURNACE_FAIL() << "unknown topology '" << printable(name_or_path) << "' (known: "
                 << (names.empty() ? "none in '" + dir + "'" : known.str()) << ")";
  return {};  // unreachable
}

}  // namespace furnace
