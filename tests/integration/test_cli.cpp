// The `furnace` command as a user runs it: results, the --json contract, the trace file, and one
// clear line with a non-zero exit for every kind of bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "integration/cli_harness.h"  // defines: CliHarness, CliRun, slurp

namespace {

namespace fs = std::filesystem;
using furnace::cli_test::CliRun;
using furnace::cli_test::slurp;

class Cli : public furnace::cli_test::CliHarness {};

TEST_F(Cli, TrainJsonContract) {
  CliRun r = furnace("train --data " + slice() + " --epochs 3 --json --quiet");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  auto j = nlohmann::json::parse(last);
  EXPECT_EQ(j["backend"], "sim");
  EXPECT_EQ(j["epochs"], 3);
  EXPECT_EQ(j["steps"], 24);  // 3 x ceil(2000 / 256)
  EXPECT_LT(j["final_loss"].get<double>(), 1.3);  // from ln(10) = 2.30: it learns
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.6);  // 10 classes: chance is 0.1
  EXPECT_GT(j["samples_per_s"].get<double>(), 0.0);
  ASSERT_EQ(j["memory"].size(), 1u);
  const auto& m = j["memory"][0];
  EXPECT_EQ(m["device"], 0);
  // Parameters alone are (784*512 + 512 + 512*512 + 512 + 512*10 + 10) * 4 bytes = 2.68 MB.
  EXPECT_GT(m["peak_allocated_bytes"].get<uint64_t>(), 2681896u * 3);  // params + grads + momentum
  EXPECT_GE(m["peak_reserved_bytes"].get<uint64_t>(), m["peak_allocated_bytes"].get<uint64_t>());
}

// The summary names the OpenBLAS kernel the simulator's GEMMs ran: OpenBLAS's pick for this CPU,
// or OPENBLAS_CORETYPE's where the environment sets it, which it then says; and whether the CPU has
// AVX-512 that kernel leaves unused.
TEST_F(Cli, TrainSaysWhichOpenBlasKernelRanItsGemms) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  const std::string args = "train --data " + slice() + " --steps 2 --no-eval";
  CliRun r = furnace(args, "-u OPENBLAS_CORETYPE");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string from = "samples/s (wall clock, this CPU, OpenBLAS's ";
  const size_t at = r.out.find(from);
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string rest = r.out.substr(at + from.size(), r.out.find('\n', at) - at - from.size());
  const std::string name = rest.substr(0, rest.find(' '));
  ASSERT_FALSE(name.empty()) << rest;
  const bool wide = name == "SkylakeX" || name == "Cooperlake" || name == "SapphireRapids";
  EXPECT_EQ(rest, name + (avx512 && !wide ? " kernel, though this CPU has AVX-512)" : " kernel)"));
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 for Haswell's kernels";
  r = furnace(args, "OPENBLAS_CORETYPE=Haswell");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string said = std::string("(wall clock, this CPU, OpenBLAS's Haswell kernel, from OPENBLAS_CORETYPE") +
                           (avx512 ? ", though this CPU has AVX-512)" : ")");
  EXPECT_NE(r.out.find(said), std::string::npos) << r.out;
  // A name OpenBLAS does not know: it picks its own kernel, and the line does not blame the variable.
  r = furnace(args, "OPENBLAS_CORETYPE=NoSuchCore");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("(wall clock, this CPU, OpenBLAS's " + name + " kernel, its own pick: OpenBLAS did not take "
                       "OPENBLAS_CORETYPE=NoSuchCore"), std::string::npos) << r.out;
}

TEST_F(Cli, TraceHasAProcessPerDeviceAndNestedTracks) {
  const fs::path trace = dir_ / "t.json";
  CliRun r = furnace("train --data " + slice() + " --epochs 1 --steps 3 --no-eval --quiet --trace " + trace.string());
  ASSERT_EQ(r.status, 0) << r.err;
  auto doc = nlohmann::json::parse(slurp(trace));
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  int kernels = 0, copies = 0, counters = 0, phases = 0;
  bool named_device = false;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name" && e["pid"] == 0)
      named_device = e["args"]["name"] == "cuda:0 NVIDIA GeForce RTX 4060 Laptop GPU";  // laptop-4060
    if (ph == "C") ++counters;
    if (ph != "X") continue;
    const std::string cat = e["cat"];
    kernels += cat == "kernel";
    copies += cat == "copy";
    phases += cat == "phase";
    tracks[{e["pid"], e["tid"]}].emplace_back(e["ts"], e["ts"].get<double>() + e["dur"].get<double>());
  }
  EXPECT_TRUE(named_device);
  EXPECT_GT(kernels, 3 * 10);
  EXPECT_GE(copies, 3 * 2);
  EXPECT_EQ(phases, 3 * 5);
  EXPECT_GT(counters, 10);
  for (auto& [track, spans] : tracks) {
    std::sort(spans.begin(), spans.end());
    std::vector<double> open_ends;  // a stack of enclosing spans
    for (const auto& [b, e] : spans) {
      while (!open_ends.empty() && open_ends.back() <= b + 1e-9) open_ends.pop_back();
      if (!open_ends.empty()) EXPECT_LE(e, open_ends.back() + 1e-9) << "track " << track.first << "/" << track.second << " overlaps at ts " << b;
      open_ends.push_back(e);
    }
  }
}

TEST_F(Cli, MemoryInstrumentJson) {
  CliRun r = furnace("memory --alloc 1,5MiB,30MiB --free 0 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out.substr(r.out.rfind('{', r.out.find("\"steps\"")) ));
  const auto& s = j["steps"];
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0]["allocated"], 512);
  EXPECT_EQ(s[0]["reserved"], 2 << 20);
  EXPECT_EQ(s[1]["reserved"], (2 << 20) + (20 << 20));
  EXPECT_EQ(s[2]["reserved"], (2 << 20) + (20 << 20) + (30 << 20));
  EXPECT_EQ(s[3]["op"], "free");
  EXPECT_EQ(s[3]["allocated"], (5 << 20) + (30 << 20));
}

// A run whose loss became NaN says it diverged, and why when the loss was not divided by --accum.
TEST_F(Cli, ADivergedRunSaysSo) {
  const std::string run = "train --data " + slice() + " --epochs 2 --batch 50 --lr 5 --lr-schedule constant --no-eval --quiet";
  CliRun r = furnace(run + " --accum 4 --accum-no-divide");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("diverged        the loss is no longer a number"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the loss not divided by --accum"), std::string::npos) << r.out;
  CliRun fine = furnace("train --data " + slice() + " --epochs 1 --steps 3 --no-eval --quiet");
  ASSERT_EQ(fine.status, 0) << fine.err;
  EXPECT_EQ(fine.out.find("diverged"), std::string::npos) << fine.out;
}

TEST_F(Cli, BadInputGetsOneLineAndNonZeroExit) {
  expect_one_line_error("train --no-such-option", "--no-such-option");
  expect_one_line_error("frobnicate", "unknown command 'frobnicate'");
  expect_one_line_error("train --data " + (dir_ / "nowhere").string(), "nowhere");
  expect_one_line_error("train --data " + broken_copy("train-images-idx3-ubyte", std::string("GARBAGE!garbage")),
                        "not an IDX file");
  expect_one_line_error("train --data " + broken_copy("train-images-idx3-ubyte",
                        std::string("\x00\x00\x08\x03\x00\x00\x07\xd0\x00\x00\x00\x1c\x00\x00\x00\x1c", 16) + "short"),
                        "truncated");
  // 2,000 training images of 10x10 beside 28x28 test images: refused when loaded, not after the run.
  expect_one_line_error("train --data " + broken_copy("train-images-idx3-ubyte",
                        std::string("\x00\x00\x08\x03\x00\x00\x07\xd0\x00\x00\x00\x0a\x00\x00\x00\x0a", 16) +
                            std::string(2000 * 100, '\0')),
                        "the test images are 28x28 and the training images 10x10");
  expect_one_line_error("train --topology no-such-machine", "unknown topology 'no-such-machine'");
  {
    std::ofstream(dir_ / "bad.toml") << "name = \"x\"\n[[gpu]\nname = 1\n";
    expect_one_line_error("train --topology " + (dir_ / "bad.toml").string(), "bad.toml");
  }
  expect_one_line_error("train --data " + slice() + " --batch 5000", "larger than the training set");
  expect_one_line_error("train --data " + slice() + " --epochs 0", "--epochs");
  expect_one_line_error("train --data " + slice() + " --hidden 512,abc", "--hidden");
  expect_one_line_error("train --data " + slice() + " --hidden 100000,100000 --topology laptop-4060",
                        "CUDA out of memory. Tried to allocate");
  expect_one_line_error("train --data " + slice() + " --device 3", "invalid device ordinal 3");
  expect_one_line_error("train --data " + slice() + " --accum 0", "--accum must be at least 1");
  expect_one_line_error("train --data " + slice() + " --amp fp8", "--amp must be off, fp16 or bf16");
  expect_one_line_error("train --data " + slice() + " --workers -1", "num_workers option should be non-negative");
  expect_one_line_error("train --data " + slice() + " --prefetch-factor 4", "prefetch_factor option could only be specified");
  expect_one_line_error("memory --alloc 5MiB,banana", "banana");
  expect_one_line_error("memory --alloc 5MiB --free 4", "4");
  // 1 EiB or more: PyTorch's one sentence, before the allocator runs (nor any rounding near 2^64).
  for (const char* size : {"1152921504606846976", "18446744073709551615"})
    expect_one_line_error(std::string("memory --alloc ") + size,
                          "furnace: error: CUDA out of memory. Tried to allocate more than 1EB memory.");
}

}  // namespace
