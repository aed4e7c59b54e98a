// What the stand-in runtime's tests share: running the real `furnace` (or any command) with the
// stand-in CUDA runtime LD_PRELOADed (tests/standin/cuda_standin.cpp) and a chosen environment,
// capturing its exit status, stdout and stderr. Results under the stand-in are never GPU results.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace furnace::standin_test {

struct Run {
  int status = -1;  // exit status; -1 when the child did not exit normally
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string standin_dir() {
  const std::string lib = FURNACE_CUDA_STANDIN;
  return lib.substr(0, lib.rfind('/'));
}

// `env` is a list of NAME=value words (single-quoted by the caller where needed). Every stand-in
// variable and CUDA_VISIBLE_DEVICES start unset; FURNACE_BACKEND is unset so `auto` means auto.
inline Run run_with_standin(const std::string& env, const std::string& command) {
  char tmpl[] = "/tmp/furnace-standin-XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd >= 0) close(fd);
  const std::string err_path = tmpl;
  const std::string cmd =
      "env -u CUDA_VISIBLE_DEVICES -u CUDA_DEVICE_ORDER -u FURNACE_BACKEND -u FURNACE_STANDIN_GPUS "
      "-u FURNACE_STANDIN_DRIVER -u FURNACE_STANDIN_DRIVER_VERSION -u FURNACE_STANDIN_MEMORY_MIB "
      "-u FURNACE_STANDIN_CONTEXT_MIB -u FURNACE_STANDIN_NAME -u FURNACE_STANDIN_NOT_READY -u FURNACE_STANDIN_EVENT_STEP_S -u FURNACE_STANDIN_NCCL "
      "LD_PRELOAD=" + std::string(FURNACE_CUDA_STANDIN) + " LD_LIBRARY_PATH=" + standin_dir() + " " + env +
      " " + command + " 2>" + err_path;
  Run r;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  r.err = slurp(err_path);
  std::remove(err_path.c_str());
  return r;
}

inline Run furnace_with_standin(const std::string& env, const std::string& args) {
  return run_with_standin(env, std::string(FURNACE_CLI) + " " + args);
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace furnace::standin_test
