// Tests for the machine layer's topology loader (runtime/src/machine/topology.cpp) and the built-in
// files in data/topologies/: figures, unit conversions, lookup, and one clear line per bad file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>  // defines: getpid

#include "furnace/error.h"     // defines: furnace::Error
#include "furnace/topology.h"  // defines: load_topology, parse_topology, Topology

namespace furnace {
namespace {

constexpr double kGB = 1e9;
constexpr double kT = 1e12;
constexpr uint64_t kMiB = uint64_t{1} << 20;

// Sets or unsets one environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The built-in files, found through FURNACE_DATA_DIR whatever the caller's shell has set.
class BuiltinTopologies : public ::testing::Test {
 protected:
  ScopedEnv no_topology_dir_{"FURNACE_TOPOLOGY_DIR", nullptr};
#ifdef FURNACE_TEST_DATA_DIR
  ScopedEnv data_dir_{"FURNACE_DATA_DIR", FURNACE_TEST_DATA_DIR};
#else
  ScopedEnv data_dir_{"FURNACE_DATA_DIR", nullptr};  // the compiled-in default
#endif
};

// The message of the furnace::Error that `f` throws ("" if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string parse_error(const std::string& text) {
  return error_of([&] { parse_topology(text, "bad.toml"); });
}

// A valid two-GPU file; tests break one thing at a time.
const std::string kHost = R"(
description = "test box"
source = "made up"
[host]
pinned_gbps = 25
pageable_gbps = 12.5
latency_us = 10
)";

std::string gpu(const std::string& pci, const std::string& extra = "") {
  return "[[gpu]]\n"
         "name = \"Test GPU\"\n"
         "pci_bus_id = \"" + pci + "\"\n"
         "memory_mib = 1024\n"
         "context_mib = 100\n"
         "sm_count = 10\n"
         "compute_capability = \"8.6\"\n"
         "tflops_fp32 = 10\n"
         "tflops_fp16 = 20\n"
         "tflops_bf16 = 20\n"
         "memory_gbps = 500\n"
         "launch_latency_us = 5\n" + extra;
}

const std::string kTwoGpus = kHost + gpu("00000000:01:00.0") + gpu("00000000:02:00.0");

// Expects `text` to fail to parse with one line containing every piece of `parts`.
void expect_error(const std::string& text, std::initializer_list<std::string> parts) {
  std::string msg = parse_error(text);
  ASSERT_FALSE(msg.empty()) << "parsed without error:\n" << text;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (const std::string& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

// ---- Built-in files ---------------------------------------------------------------------------

TEST_F(BuiltinTopologies, ListIsSortedAndHasTheFourBuiltins) {
  std::vector<std::string> names = list_topologies();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  std::set<std::string> have(names.begin(), names.end());
  for (const char* n : {"dgx-h100", "laptop-4060", "mixed-3090-3060", "workstation-4x3090"})
    EXPECT_TRUE(have.count(n)) << n;
}

TEST_F(BuiltinTopologies, EveryBuiltinLoadsWithUniqueIdsInPciOrder) {
  for (const std::string& n : list_topologies()) {
    SCOPED_TRACE(n);
    Topology t = load_topology(n);
    EXPECT_EQ(t.name, n);
    EXPECT_FALSE(t.source.empty());
    ASSERT_FALSE(t.gpus.empty());
    std::set<std::string> uuids, buses;
    for (size_t i = 0; i < t.gpus.size(); ++i) {
      const GpuSpec& g = t.gpus[i];
      EXPECT_TRUE(uuids.insert(g.uuid).second) << g.uuid;
      EXPECT_TRUE(buses.insert(g.pci_bus_id).second) << g.pci_bus_id;
      EXPECT_EQ(g.uuid.size(), 40u) << g.uuid;
      EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
      if (i > 0) {
        EXPECT_LT(t.gpus[i - 1].pci_bus_id, g.pci_bus_id);
      }
      EXPECT_LT(g.context_bytes, g.memory_bytes);
      EXPECT_GE(g.context_bytes, 300 * kMiB);
      EXPECT_LE(g.context_bytes, 700 * kMiB);  // h200: 588 MiB measured + cuBLAS's 32 MiB workspace
      EXPECT_DOUBLE_EQ(g.launch_latency_s, 5e-6);
    }
    EXPECT_LE(t.host.pageable_bandwidth, t.host.pinned_bandwidth);
  }
}

TEST_F(BuiltinTopologies, DgxH100) {
  Topology t = load_topology("dgx-h100");
  ASSERT_EQ(t.gpus.size(), 8u);
  const GpuSpec& g = t.gpus[0];
  EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g.memory_bytes, 81559 * kMiB);
  EXPECT_EQ(g.sm_count, 132);
  EXPECT_EQ(g.compute_capability_major, 9);
  EXPECT_EQ(g.compute_capability_minor, 0);
  EXPECT_DOUBLE_EQ(g.peak_flops_f32, 67 * kT);
  EXPECT_DOUBLE_EQ(g.peak_flops_f16, 989.4 * kT);
  EXPECT_DOUBLE_EQ(g.peak_flops_bf16, 989.4 * kT);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth, 3.35e12);
  EXPECT_EQ(t.gpus[0].pci_bus_id, "00000000:18:00.0");
  EXPECT_EQ(t.gpus[7].pci_bus_id, "00000000:DB:00.0");
  for (const GpuSpec& x : t.gpus) EXPECT_EQ(x.memory_bytes, g.memory_bytes);
  EXPECT_EQ(t.links.size(), 28u);  // all 8*7/2 pairs
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      LinkSpec l = t.link_between(a, b);
      EXPECT_EQ(l.kind, LinkKind::nvlink);
      EXPECT_EQ(l.a, a);
      EXPECT_EQ(l.b, b);
      EXPECT_DOUBLE_EQ(l.bandwidth, 450 * kGB);
    }
  EXPECT_DOUBLE_EQ(t.host.pinned_bandwidth, 50 * kGB);
}

TEST_F(BuiltinTopologies, Workstation4x3090) {
  Topology t = load_topology("workstation-4x3090");
  ASSERT_EQ(t.gpus.size(), 4u);
  for (const GpuSpec& g : t.gpus) {
    EXPECT_EQ(g.name, "NVIDIA GeForce RTX 3090");
    EXPECT_EQ(g.memory_bytes, 24576 * kMiB);
    EXPECT_EQ(g.sm_count, 82);
    EXPECT_EQ(g.compute_capability_major, 8);
    EXPECT_EQ(g.compute_capability_minor, 6);
    EXPECT_DOUBLE_EQ(g.peak_flops(DType::f32), 35.6 * kT);
    EXPECT_DOUBLE_EQ(g.peak_flops(DType::f16), 71 * kT);
    EXPECT_DOUBLE_EQ(g.peak_flops(DType::bf16), 71 * kT);
    EXPECT_DOUBLE_EQ(g.memory_bandwidth, 936 * kGB);
  }
  EXPECT_TRUE(t.links.empty());  // no NVLink, no P2P on GeForce
  LinkSpec l = t.link_between(1, 3);
  EXPECT_EQ(l.kind, LinkKind::pcie);
  EXPECT_DOUBLE_EQ(l.bandwidth, 25 * kGB);
  EXPECT_DOUBLE_EQ(l.latency_s, 10e-6);
  EXPECT_DOUBLE_EQ(t.host.pageable_bandwidth, 12.5 * kGB);
}

TEST_F(BuiltinTopologies, Mixed3090And3060IsBelowDataParallelBalanceThreshold) {
  Topology t = load_topology("mixed-3090-3060");
  ASSERT_EQ(t.gpus.size(), 2u);
  // The slower card is on the lower bus id (nvidia-smi's GPU 0), so CUDA's FASTEST_FIRST and
  // PCI_BUS_ID orders disagree on this machine (tests/machine/test_visibility.cpp).
  EXPECT_EQ(t.gpus[0].name, "NVIDIA GeForce RTX 3060");
  EXPECT_EQ(t.gpus[1].name, "NVIDIA GeForce RTX 3090");
  EXPECT_LT(t.gpus[0].pci_bus_id, t.gpus[1].pci_bus_id);
  EXPECT_EQ(t.gpus[0].memory_bytes, 12288 * kMiB);
  EXPECT_EQ(t.gpus[0].sm_count, 28);
  EXPECT_DOUBLE_EQ(t.gpus[0].peak_flops_f32, 12.7 * kT);
  EXPECT_DOUBLE_EQ(t.gpus[0].memory_bandwidth, 360 * kGB);
  double ratio = double(t.gpus[0].memory_bytes) / double(t.gpus[1].memory_bytes);
  EXPECT_DOUBLE_EQ(ratio, 0.5);
  EXPECT_LT(ratio, 0.75);
}

TEST_F(BuiltinTopologies, Laptop4060) {
  Topology t = load_topology("laptop-4060");
  ASSERT_EQ(t.gpus.size(), 1u);
  const GpuSpec& g = t.gpus[0];
  EXPECT_EQ(g.name, "NVIDIA GeForce RTX 4060 Laptop GPU");
  EXPECT_EQ(g.memory_bytes, 8188 * kMiB);
  EXPECT_EQ(g.sm_count, 24);
  EXPECT_EQ(g.compute_capability_major, 8);
  EXPECT_EQ(g.compute_capability_minor, 9);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth, 256 * kGB);
}

TEST_F(BuiltinTopologies, LoadsByPathToo) {
  std::string path = topology_dir() + "/dgx-h100.toml";
  Topology t = load_topology(path);
  EXPECT_EQ(t.name, "dgx-h100");
  EXPECT_EQ(t.gpus.size(), 8u);
}

TEST_F(BuiltinTopologies, UnknownNameListsTheKnownOnes) {
  std::string msg = error_of([] { load_topology("dgx-h200"); });
  EXPECT_NE(msg.find("unknown topology 'dgx-h200'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("known: dgx-h100, h200, laptop-4060, mixed-3090-3060, workstation-4x3090"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST_F(BuiltinTopologies, MissingPath) {
  std::string msg = error_of([] { load_topology("/nonexistent/box.toml"); });
  EXPECT_NE(msg.find("'/nonexistent/box.toml' not found"), std::string::npos) << msg;
  msg = error_of([] { load_topology("box.toml"); });  // .toml suffix: a path, not a name
  EXPECT_NE(msg.find("'box.toml' not found"), std::string::npos) << msg;
}

// ---- The topology directory -------------------------------------------------------------------

TEST(TopologyDir, EnvironmentOrder) {
  ScopedEnv t("FURNACE_TOPOLOGY_DIR", "/a/topos");
  ScopedEnv d("FURNACE_DATA_DIR", "/b/data");
  EXPECT_EQ(topology_dir(), "/a/topos");
  {
    ScopedEnv t2("FURNACE_TOPOLOGY_DIR", nullptr);
    EXPECT_EQ(topology_dir(), "/b/data/topologies");
    ScopedEnv d2("FURNACE_DATA_DIR", nullptr);
    std::string dir = topology_dir();
    EXPECT_EQ(dir.substr(dir.size() - std::string("/topologies").size()), "/topologies");
  }
}

TEST(TopologyDir, UserDirectoryReplacesTheBuiltins) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("furnace_topo_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "my-box.toml") << kTwoGpus;
  std::ofstream(dir / "notes.txt") << "not a topology";
  ScopedEnv t("FURNACE_TOPOLOGY_DIR", dir.c_str());
  EXPECT_EQ(list_topologies(), std::vector<std::string>{"my-box"});
  Topology topo = load_topology("my-box");
  EXPECT_EQ(topo.name, "my-box");  // no name key: the file's stem
  EXPECT_EQ(topo.gpus.size(), 2u);
  std::string msg = error_of([] { load_topology("dgx-h100"); });
  EXPECT_NE(msg.find("(known: my-box)"), std::string::npos) << msg;
  fs::remove_all(dir);

  msg = error_of([] { load_topology("x"); });  // the directory is gone now
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

// ---- Parsing: a valid file, units, generated ids ----------------------------------------------

TEST(ParseTopology, ConvertsUnitsToSi) {
  Topology t = parse_topology(kTwoGpus, "/some/where/test-box.toml");
  EXPECT_EQ(t.name, "test-box");
  EXPECT_EQ(t.description, "test box");
  ASSERT_EQ(t.gpus.size(), 2u);
  const GpuSpec& g = t.gpus[0];
  EXPECT_EQ(g.memory_bytes, 1024 * kMiB);
  EXPECT_EQ(g.context_bytes, 100 * kMiB);
  EXPECT_DOUBLE_EQ(g.peak_flops_f32, 10e12);
  EXPECT_DOUBLE_EQ(g.peak_flops_f16, 20e12);
  EXPECT_DOUBLE_EQ(g.memory_bandwidth, 500e9);
  EXPECT_DOUBLE_EQ(g.launch_latency_s, 5e-6);
  EXPECT_DOUBLE_EQ(t.host.pinned_bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(t.host.pageable_bandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(t.host.latency_s, 10e-6);
}

TEST(ParseTopology, PeakFlopsByDtype) {
  GpuSpec g;
  g.peak_flops_f32 = 1;
  g.peak_flops_f16 = 2;
  g.peak_flops_bf16 = 3;
  EXPECT_EQ(g.peak_flops(DType::f32), 1);
  EXPECT_EQ(g.peak_flops(DType::f16), 2);
  EXPECT_EQ(g.peak_flops(DType::bf16), 3);
  EXPECT_EQ(g.peak_flops(DType::i32), 1);
  EXPECT_EQ(g.peak_flops(DType::u8), 1);
}

TEST(ParseTopology, GeneratedUuidsAreStableAndWellFormed) {
  Topology a = parse_topology(kTwoGpus, "x.toml");
  Topology b = parse_topology(kTwoGpus, "x.toml");
  EXPECT_EQ(a.gpus[0].uuid, b.gpus[0].uuid);
  EXPECT_NE(a.gpus[0].uuid, a.gpus[1].uuid);
  for (const GpuSpec& g : a.gpus) {
    ASSERT_EQ(g.uuid.size(), 40u);
    EXPECT_EQ(g.uuid.substr(0, 4), "GPU-");
    for (size_t i = 4; i < g.uuid.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(g.uuid[i]);
      if (i == 12 || i == 17 || i == 22 || i == 27) {
        EXPECT_EQ(c, '-') << g.uuid;
      } else {
        EXPECT_TRUE(std::isxdigit(c) && !std::isupper(c)) << g.uuid;
      }
    }
  }
}

TEST(ParseTopology, ExplicitIdsAreNormalized) {
  Topology t = parse_topology(
      kHost + gpu("00000000:1b:00.0", "uuid = \"GPU-ABCDEF01-2345-6789-abcd-ef0123456789\"\n"),
      "x.toml");
  EXPECT_EQ(t.gpus[0].pci_bus_id, "00000000:1B:00.0");
  EXPECT_EQ(t.gpus[0].uuid, "GPU-abcdef01-2345-6789-abcd-ef0123456789");
}

TEST(ParseTopology, CountReplicatesAnEntry) {
  std::string text = kHost + R"(
[[gpu]]
count = 3
name = "Triple"
pci_bus_id = ["00000000:01:00.0", "00000000:02:00.0", "00000000:03:00.0"]
uuid = ["GPU-00000000-0000-0000-0000-000000000001", "GPU-00000000-0000-0000-0000-000000000002",
        "GPU-00000000-0000-0000-0000-000000000003"]
memory_mib = 2048
context_mib = 100
sm_count = 4
compute_capability = "12.0"
tflops_fp32 = 1
tflops_fp16 = 2
tflops_bf16 = 2
memory_gbps = 100
launch_latency_us = 5
)" + gpu("00000000:04:00.0");
  Topology t = parse_topology(text, "x.toml");
  ASSERT_EQ(t.gpus.size(), 4u);
  EXPECT_EQ(t.gpus[2].name, "Triple");
  EXPECT_EQ(t.gpus[2].pci_bus_id, "00000000:03:00.0");
  EXPECT_EQ(t.gpus[2].uuid, "GPU-00000000-0000-0000-0000-000000000003");
  EXPECT_EQ(t.gpus[1].compute_capability_major, 12);
  EXPECT_EQ(t.gpus[3].name, "Test GPU");
}

// ---- Links ------------------------------------------------------------------------------------

TEST(LinkBetween, ListedUnlistedAndSameDevice) {
  std::string text = kHost + gpu("00000000:01:00.0") + gpu("00000000:02:00.0") +
                     gpu("00000000:03:00.0") + R"(
[[link]]
a = 0
b = 1
kind = "nvlink"
gbps = 300
latency_us = 2
)";
  Topology t = parse_topology(text, "x.toml");
  ASSERT_EQ(t.links.size(), 1u);

  LinkSpec l = t.link_between(1, 0);  // either direction
  EXPECT_EQ(l.kind, LinkKind::nvlink);
  EXPECT_EQ(l.a, 1);
  EXPECT_EQ(l.b, 0);
  EXPECT_DOUBLE_EQ(l.bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(l.latency_s, 2e-6);

  l = t.link_between(0, 2);  // unlisted: PCIe through the host
  EXPECT_EQ(l.kind, LinkKind::pcie);
  EXPECT_DOUBLE_EQ(l.bandwidth, t.host.pinned_bandwidth);
  EXPECT_DOUBLE_EQ(l.latency_s, t.host.latency_s);

  l = t.link_between(2, 2);  // same device: memory bandwidth, not infinitely fast
  EXPECT_EQ(l.kind, LinkKind::local);
  EXPECT_DOUBLE_EQ(l.bandwidth, t.gpus[2].memory_bandwidth);
  EXPECT_GT(l.latency_s, 0);

  std::string msg = error_of([&] { t.link_between(0, 3); });
  EXPECT_NE(msg.find("3 GPUs"), std::string::npos) << msg;
  EXPECT_FALSE(error_of([&] { t.link_between(-1, 0); }).empty());
}

TEST(LinkBetween, AllTrueJoinsEveryPair) {
  std::string text = kHost + gpu("00000000:01:00.0") + gpu("00000000:02:00.0") +
                     gpu("00000000:03:00.0") +
                     "[[link]]\nall = true\nkind = \"nvlink\"\ngbps = 450\nlatency_us = 2\n";
  Topology t = parse_topology(text, "x.toml");
  EXPECT_EQ(t.links.size(), 3u);
  EXPECT_EQ(t.link_between(2, 0).kind, LinkKind::nvlink);
}

TEST(LinkKindNames, RoundTrip) {
  EXPECT_EQ(parse_link_kind("pcie"), LinkKind::pcie);
  EXPECT_EQ(parse_link_kind("nvlink"), LinkKind::nvlink);
  EXPECT_STREQ(link_kind_name(LinkKind::pcie), "pcie");
  EXPECT_STREQ(link_kind_name(LinkKind::nvlink), "nvlink");
  EXPECT_STREQ(link_kind_name(LinkKind::local), "local");
  std::string msg = error_of([] { parse_link_kind("infiniband"); });
  EXPECT_NE(msg.find("unknown link kind 'infiniband'"), std::string::npos) << msg;
  EXPECT_THROW(parse_link_kind("local"), Error);  // not a kind a file may name
}

// ---- Malformed files: one line each, naming the problem ---------------------------------------

TEST(MalformedTopology, SyntaxErrorNamesFileLineAndColumn) {
  std::string msg = parse_error("description = \"x\"\nsource = \n");
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("bad.toml:2:", 0), 0u) << msg;
  EXPECT_NE(msg.find("TOML syntax error"), std::string::npos) << msg;
  expect_error(kTwoGpus + "[host]\npinned_gbps = 1\n", {"bad.toml:", "TOML syntax error"});
}

TEST(MalformedTopology, MissingKeys) {
  expect_error(kHost + gpu("00000000:01:00.0") + R"([[gpu]]
name = "Test GPU"
pci_bus_id = "00000000:02:00.0"
context_mib = 100
sm_count = 10
compute_capability = "8.6"
tflops_fp32 = 10
tflops_fp16 = 20
tflops_bf16 = 20
memory_gbps = 500
launch_latency_us = 5
)",
               {"bad.toml:", "gpu 1: missing 'memory_mib'"});
  expect_error("description = \"x\"\n[host]\npinned_gbps = 1\npageable_gbps = 1\nlatency_us = 1\n",
               {"bad.toml: missing 'source'"});
  expect_error("description = \"x\"\nsource = \"y\"\n" + gpu("00000000:01:00.0"),
               {"missing [host] table"});
  expect_error("description = \"x\"\nsource = \"y\"\n[host]\npinned_gbps = 1\nlatency_us = 1\n" +
                   gpu("00000000:01:00.0"),
               {"[host]: missing 'pageable_gbps'"});
  expect_error(kTwoGpus + "[[link]]\na = 0\nkind = \"pcie\"\ngbps = 1\nlatency_us = 1\n",
               {"link 0: missing 'b'"});
}

TEST(MalformedTopology, WrongTypes) {
  std::string t = kTwoGpus;
  t.replace(t.find("sm_count = 10"), 13, "sm_count = \"lots\"");
  expect_error(t, {"gpu 0", "'sm_count' must be an integer, got a string"});
  t = kTwoGpus;
  t.replace(t.find("memory_mib = 1024"), 17, "memory_mib = 1024.5");
  expect_error(t, {"gpu 0", "'memory_mib' must be an integer, got a float"});
  t = kTwoGpus;
  t.replace(t.find("compute_capability = \"8.6\""), 26, "compute_capability = 8.6");
  expect_error(t, {"'compute_capability' must be a string, got a float"});
  t = kTwoGpus;
  t.replace(t.find("compute_capability = \"8.6\""), 26, "compute_capability = \"sm_86\"");
  expect_error(t, {"'compute_capability' must look like \"8.6\", got \"sm_86\""});
  t = kTwoGpus;
  t.replace(t.find("pinned_gbps = 25"), 16, "pinned_gbps = \"fast\"");
  expect_error(t, {"[host]: 'pinned_gbps' must be a number, got a string"});
  expect_error("description = \"x\"\nsource = \"y\"\nhost = 3\n", {"'host' must be a table"});
  expect_error(kHost + "[gpu]\nname = \"x\"\n", {"'gpu' must be an array of tables ([[gpu]])"});
  expect_error(kTwoGpus + "[[link]]\na = \"0\"\nb = 1\nkind = \"pcie\"\ngbps = 1\nlatency_us = 1\n",
               {"link 0: 'a' must be an integer, got a string"});
}

TEST(MalformedTopology, NonPositiveNumbers) {
  std::string t = kTwoGpus;
  t.replace(t.find("tflops_fp32 = 10"), 16, "tflops_fp32 = -10");
  expect_error(t, {"gpu 0", "'tflops_fp32' must be a positive finite number, got -10"});
  t = kTwoGpus;
  t.replace(t.find("sm_count = 10"), 13, "sm_count = 0");
  expect_error(t, {"'sm_count' must be positive, got 0"});
  t = kTwoGpus;
  t.replace(t.find("latency_us = 10"), 15, "latency_us = 0.0");
  expect_error(t, {"[host]: 'latency_us' must be a positive finite number"});
  t = kTwoGpus;
  t.replace(t.find("memory_gbps = 500"), 17, "memory_gbps = inf");
  expect_error(t, {"'memory_gbps' must be a positive finite number, got inf"});
  t = kTwoGpus;
  t.replace(t.find("context_mib = 100"), 17, "context_mib = 2000");
  expect_error(t, {"'context_mib' (2000) must be less than 'memory_mib' (1024)"});
  expect_error(kTwoGpus + "[[link]]\na = 0\nb = 1\nkind = \"pcie\"\ngbps = 0\nlatency_us = 1\n",
               {"link 0: 'gbps' must be a positive finite number, got 0"});
}

TEST(MalformedTopology, NoGpus) {
  expect_error(kHost, {"bad.toml: no GPUs"});
  expect_error("gpu = []\n" + kHost, {"no GPUs"});
}

TEST(MalformedTopology, LinkIndicesOutOfRange) {
  expect_error(kTwoGpus + "[[link]]\na = 0\nb = 2\nkind = \"pcie\"\ngbps = 1\nlatency_us = 1\n",
               {"link 0: 'b' = 2 is out of range (the file has 2 GPUs, 0..1)"});
  expect_error(kTwoGpus + "[[link]]\na = -1\nb = 1\nkind = \"pcie\"\ngbps = 1\nlatency_us = 1\n",
               {"'a' = -1 is out of range"});
  expect_error(kTwoGpus + "[[link]]\na = 1\nb = 1\nkind = \"pcie\"\ngbps = 1\nlatency_us = 1\n",
               {"'a' and 'b' are both 1"});
  std::string link = "[[link]]\na = 0\nb = 1\nkind = \"nvlink\"\ngbps = 1\nlatency_us = 1\n";
  expect_error(kTwoGpus + link + "[[link]]\na = 1\nb = 0\nkind = \"nvlink\"\ngbps = 2\nlatency_us = 1\n",
               {"link 1: GPUs 1 and 0 are already joined by link 0"});
  expect_error(kTwoGpus + "[[link]]\nall = true\na = 0\nkind = \"nvlink\"\ngbps = 1\nlatency_us = 1\n",
               {"either 'all = true' or 'a' and 'b'"});
}

TEST(MalformedTopology, DuplicateIds) {
  expect_error(kHost + gpu("00000000:01:00.0") + gpu("00000000:01:00.0"),
               {"gpu 1: duplicate pci_bus_id '00000000:01:00.0' (also gpu 0)"});
  std::string u = "uuid = \"GPU-11111111-2222-3333-4444-555555555555\"\n";
  expect_error(kHost + gpu("00000000:01:00.0", u) + gpu("00000000:02:00.0", u),
               {"gpu 1: duplicate uuid 'GPU-11111111-2222-3333-4444-555555555555' (also gpu 0)"});
  expect_error(kHost + gpu("00000000:02:00.0") + gpu("00000000:01:00.0"),
               {"gpu 1", "list GPUs in PCI bus order"});
  expect_error(kHost + gpu("0000:01:00.0"), {"'pci_bus_id' must look like \"00000000:1B:00.0\""});
  expect_error(kHost + gpu("00000000:01:00.0", "uuid = \"GPU-1234\"\n"), {"'uuid' must look like"});
}

TEST(MalformedTopology, CountMismatch) {
  std::string t = kHost + gpu("00000000:01:00.0", "count = 2\n");
  expect_error(t, {"gpus 0-1", "'pci_bus_id' must be an array of 2 strings"});
  t = kHost + gpu("00000000:01:00.0", "count = 0\n");
  expect_error(t, {"'count' must be positive, got 0"});
}

TEST(MalformedTopology, UnknownLinkKind) {
  expect_error(kTwoGpus + "[[link]]\na = 0\nb = 1\nkind = \"infiniband\"\ngbps = 1\nlatency_us = 1\n",
               {"link 0: unknown link kind 'infiniband' (expected \"pcie\" or \"nvlink\")"});
}

TEST(MalformedTopology, UnknownKeysAreNamed) {
  std::string t = kTwoGpus;
  t.replace(t.find("memory_mib = 1024"), 17, "memory_mib = 1024\nmemroy_gbps = 5");
  expect_error(t, {"gpu 0: unknown key 'memroy_gbps' (did you mean 'memory_gbps'?)"});
  expect_error("colour = \"red\"\n" + kTwoGpus, {"bad.toml:1: unknown key 'colour' (allowed:"});
  t = kTwoGpus;
  t.replace(t.find("latency_us = 10"), 15, "latency_us = 10\npinned = 3");
  expect_error(t, {"[host]: unknown key 'pinned'"});
  expect_error(kTwoGpus + "[[link]]\na = 0\nb = 1\nkind = \"pcie\"\ngbps = 1\nlatency_us = 1\nduplex = true\n",
               {"link 0: unknown key 'duplex'"});
}

TEST(MalformedTopology, ErrorsPointAtTheLine) {
  // kHost starts with a newline: [[gpu]] is on line 8, the misspelt key on line 9.
  std::string t = kHost + "[[gpu]]\nnmae = \"x\"\n";
  std::string msg = parse_error(t);
  EXPECT_NE(msg.find("bad.toml:9: gpu 0: unknown key 'nmae' (did you mean 'name'?)"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace furnace
