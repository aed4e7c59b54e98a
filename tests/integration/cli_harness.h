// The shared harness of the CLI integration tests: run `furnace` (or any program) as a user runs it
// from a shell, capture its exit status, stdout and stderr, and check the "bad input gets one clear
// line and a non-zero exit" rule. Used by tests/integration/test_cli*.cpp and the input-surface
// table (test_input_surfaces.cpp). Not here: what any command prints (each test file checks that).
//
// Every run starts from an environment without CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER (the
// commands honour them) plus the VAR=value words a test passes, reads stdin from /dev/null, and
// runs under coreutils' `timeout`, so a hang fails the test (status 124) instead of stalling ctest.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace furnace::cli_test {

namespace fs = std::filesystem;

// One finished run of a program.
struct CliRun {
  int status = -1;  // the exit status; 128 + N when killed by signal N; 124 when `timeout` stopped it
  std::string out, err;

  bool crashed() const { return status >= 124; }  // a signal, or the time limit (a hang)
  // The last line of stdout as JSON (the --json contract: the last line is one object).
  nlohmann::json last_json() const {
    const size_t end = out.find_last_not_of('\n');
    const size_t start = end == std::string::npos ? std::string::npos : out.rfind('\n', end);
    return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1));
  }
};

inline std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// Runs `program args` through /bin/sh (so args may quote, use $(printf ...) and redirections), with
// `env` ("VAR=value ...") added after clearing the CUDA variables; stderr goes through a file in
// `scratch` (one per test: tests run in parallel). A run longer than `timeout_s` is killed.
inline CliRun run_program(const std::string& program, const std::string& args, const std::string& env,
                          const fs::path& scratch, int timeout_s = 300) {
  const fs::path err = scratch / "stderr.txt";
  const std::string cmd = "env -u CUDA_VISIBLE_DEVICES -u CUDA_DEVICE_ORDER " + env + " timeout -k 5 " +
                          std::to_string(timeout_s) + " " + program + " " + args + " 2>" + err.string() +
                          " </dev/null";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    r.err = "popen failed";
    return r;
  }
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.err = slurp(err);
  return r;
}

// A test fixture with a scratch folder of its own (removed afterwards) and the `furnace` binary.
class CliHarness : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("furnace_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `furnace args` with `env` ("VAR=value ...") in its environment.
  CliRun furnace(const std::string& args, const std::string& env = "") {
    return run_program(FURNACE_CLI, args, env, dir_);
  }

  // A failing run: non-zero exit (not a crash or a hang), exactly one line on stderr containing
  // `needle`. Returns the run for further checks.
  CliRun expect_one_line_error(const std::string& args, const std::string& needle, const std::string& env = "") {
    CliRun r = furnace(args, env);
    expect_one_line_failure(r, args, needle);
    return r;
  }

  static void expect_one_line_failure(const CliRun& r, const std::string& what, const std::string& needle) {
    EXPECT_NE(r.status, 0) << what;
    EXPECT_FALSE(r.crashed()) << what << ": status " << r.status << " (killed by a signal, or hung)\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << what << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << what << "\nstderr: " << r.err;
  }

  // The committed Fashion-MNIST slice (2,000 training / 500 test images).
  static std::string slice() { return std::string(FURNACE_TEST_DATA_DIR) + "/fashion-mnist"; }

  // A topology of one simulated GPU of 1 PiB, written to huge.toml: only the host's memory limits
  // what runs on it. Returns its path.
  std::string huge_gpu_topology() {
    return write_file("huge.toml",
                      "name = \"huge\"\ndescription = \"one GPU of 1 PiB\"\nsource = \"a test\"\n"
                      "[host]\npinned_gbps = 25\npageable_gbps = 12\nlatency_us = 10\n"
                      "[[gpu]]\nname = \"Huge GPU\"\npci_bus_id = \"00000000:01:00.0\"\n"
                      "memory_mib = 1073741823\ncontext_mib = 300\nsm_count = 100\n"
                      "compute_capability = \"9.0\"\ntflops_fp32 = 60\ntflops_fp16 = 900\n"
                      "tflops_bf16 = 900\nmemory_gbps = 3000\nlaunch_latency_us = 5\n");
  }

  // Writes `bytes` to `name` in the scratch folder; returns its path.
  std::string write_file(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }

  // A copy of the slice in which `file` (e.g. "train-images-idx3-ubyte") is replaced by `bytes`
  // (raw IDX; its .gz is removed). Returns the folder.
  std::string broken_copy(const std::string& file, const std::string& bytes) {
    const fs::path d = dir_ / ("data" + std::to_string(++copies_));
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(slice()))
      if (e.path().extension() == ".gz") fs::copy_file(e.path(), d / e.path().filename());
    fs::remove(d / (file + ".gz"));
    std::ofstream(d / file, std::ios::binary) << bytes;
    return d.string();
  }

  fs::path dir_;
  int copies_ = 0;
};

}  // namespace furnace::cli_test
