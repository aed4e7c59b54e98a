// The commands' outputs, held against files recorded before a refactor: `furnace train --json`
// (fp32, fp16, bf16, DataParallel over 4 GPUs, accumulation), `furnace memory`, `devices`,
// `scatter`, `scaler`, each with a trace where one is written. A change meant to move no behaviour
// (the layers' redesign) must leave every byte of them as it was, except what the wall clock
// decides (samples_per_s, wall_s and the trace's metadata), which is blanked before comparing.
//
// To record them anew after a change that is meant to move outputs (say which in the commit):
//   FURNACE_UPDATE_GOLDEN=1 ctest -R GoldenOutputs
// (FURNACE_GOLDEN_CLI=path runs another build's `furnace` instead of this build's.) OpenBLAS runs
// its Haswell kernel for them (blas_kernel_env below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <ostream>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "integration/cli_harness.h"  // defines: CliHarness, CliRun, slurp

namespace {

namespace fs = std::filesystem;
using furnace::cli_test::CliRun;
using nlohmann::json;

struct Golden {
  const char* name;  // tests/golden/<name>.txt
  const char* args;  // after `furnace`; {data} is the committed slice, {trace} a trace file
  bool trace = false;  // the run writes {trace}: its events are compared too
  // Compare the trace's events as a sorted set: replicas on worker threads emit theirs in an order
  // the scheduler picks (each event's fields, clock stamps included, are still compared).
  bool unordered_trace = false;
};

void PrintTo(const Golden& g, std::ostream* os) { *os << g.name; }

// Short runs: three steps on the committed slice reach every op, the allocator and the scaler.
const Golden kGolden[] = {
    {"train_fp32", "train --data {data} --epochs 1 --steps 3 --quiet --json --trace {trace}", true},
    {"train_fp16", "train --data {data} --epochs 1 --steps 3 --quiet --json --amp fp16"},
    {"train_bf16", "train --data {data} --epochs 1 --steps 3 --quiet --json --amp bf16"},
    {"train_dp4",
     "train --data {data} --epochs 1 --steps 3 --quiet --json --topology workstation-4x3090 --parallel dp "
     "--device-ids 0,1,2,3 --trace {trace}",
     true, true},
    {"train_dp4_fp16",
     "train --data {data} --epochs 1 --steps 2 --no-eval --quiet --json --topology dgx-h100 --parallel dp "
     "--device-ids 0,1,2,3 --amp fp16"},
    {"train_accum", "train --data {data} --epochs 1 --steps 4 --no-eval --quiet --json --batch 64 --accum 4"},
    {"train_loader", "train --data {data} --epochs 1 --steps 3 --no-eval --quiet --json --workers 2 --pin-memory"},
    {"train_visible", "train --data {data} --epochs 1 --steps 2 --no-eval --quiet --json --topology dgx-h100 --visible 5,3 --device 1"},
    {"memory", "memory --alloc 1,5MiB,30MiB --free 0 --json"},
    {"memory_text", "memory --alloc 1,5MiB,30MiB,7GiB --free 0"},
    {"devices", "devices --topology workstation-4x3090"},
    {"devices_visible", "devices --topology dgx-h100 --json", false},
    {"scatter", "scatter --batch 10 --device-ids 0,1,2 --json"},
    {"scaler", "scaler --steps 8 --overflow-at 3,4 --growth-interval 2"},
};

// What the wall clock decides, blanked: JSON fields anywhere in the document, recursively.
void blank_wall_clock(json& j) {
  if (j.is_object()) {
    for (const char* key : {"samples_per_s", "wall_s", "wall_ms", "measured_s"})
      if (j.contains(key)) j[key] = "<wall clock>";
    for (auto& [k, v] : j.items()) blank_wall_clock(v);
  } else if (j.is_array()) {
    for (json& v : j) blank_wall_clock(v);
  }
}

// One line per stdout line; a line that is JSON is re-dumped with the wall clock blanked.
std::string normalised(const std::string& out) {
  std::string result;
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    std::string line = out.substr(start, end - start);
    if (!line.empty() && line[0] == '{') {
      json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded()) {
        blank_wall_clock(j);
        line = j.dump();
      }
    }
    result += line + "\n";
    start = end + 1;
  }
  return result;
}

// The trace's events (every field), one per line, without its metadata block.
std::string trace_events(const fs::path& trace, bool sorted) {
  json t = json::parse(furnace::cli_test::slurp(trace));
  json events = t.is_object() && t.contains("traceEvents") ? t["traceEvents"] : t;
  blank_wall_clock(events);
  std::vector<std::string> lines;
  for (const json& e : events) lines.push_back(e.dump());
  if (sorted) std::sort(lines.begin(), lines.end());
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// The 16-bit runs' losses depend on which sgemm kernel OpenBLAS picks for the CPU (its blocking
// orders the fp32 sums differently: measured, fp16 differs in the 6th digit between its Haswell,
// SkylakeX and Cooperlake kernels, fp32 does not), so every machine with AVX2 and FMA runs the
// Haswell kernel for the files, and other machines their own.
std::string blas_kernel_env() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "OPENBLAS_CORETYPE=Haswell" : "";
}

class GoldenOutputs : public furnace::cli_test::CliHarness,
                      public ::testing::WithParamInterface<Golden> {};

TEST_P(GoldenOutputs, AreTheRecordedOnes) {
  const Golden& g = GetParam();
  const fs::path trace = dir_ / "trace.json";
  std::string args = replace_all(g.args, "{data}", slice());
  args = replace_all(args, "{trace}", trace.string());
  // FURNACE_GOLDEN_CLI: another build's `furnace` (the one the files were recorded with, say).
  const char* cli = std::getenv("FURNACE_GOLDEN_CLI");
  const CliRun r = furnace::cli_test::run_program(cli ? cli : FURNACE_CLI, args, blas_kernel_env(), dir_);
  ASSERT_EQ(r.status, 0) << args << "\n" << r.err;
  std::string got = "$ furnace " + replace_all(g.args, "{trace}", "trace.json") + "\n" + normalised(r.out);
  got += "--- stderr\n" + r.err;
  if (g.trace) got += "--- trace events\n" + trace_events(trace, g.unordered_trace);

  const fs::path file = fs::path(FURNACE_GOLDEN_DIR) / (std::string(g.name) + ".txt");
  if (const char* update = std::getenv("FURNACE_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::ofstream(file, std::ios::binary) << got;
    GTEST_SKIP() << "recorded " << file;
  }
  ASSERT_TRUE(fs::exists(file)) << file << " is missing: record it with FURNACE_UPDATE_GOLDEN=1";
  const std::string want = furnace::cli_test::slurp(file);
  if (got == want) return;
  // The first line that differs, rather than two long texts.
  size_t line = 1, i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) line += got[i++] == '\n';
  const auto line_at = [](const std::string& s, size_t at) {
    const size_t b = s.rfind('\n', at == 0 ? 0 : at - 1);
    const size_t from = b == std::string::npos || at == 0 ? 0 : b + 1;
    return s.substr(from, s.find('\n', from) - from);
  };
  ADD_FAILURE() << g.name << ": output differs from " << file << " at line " << line << "\n  recorded: "
                << line_at(want, i) << "\n  now:      " << line_at(got, i);
}

INSTANTIATE_TEST_SUITE_P(Commands, GoldenOutputs, ::testing::ValuesIn(kGolden),
                         [](const ::testing::TestParamInfo<Golden>& info) { return std::string(info.param.name); });

}  // namespace
