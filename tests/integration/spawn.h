// Starting `furnace` as a child process the test can signal, and waiting for it: the checkpoint
// kill loop, the stop-signal tests and the soak test share these. Not here: runs that only need
// their output (cli_harness.h runs those through the shell).
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

namespace furnace::cli_test {

// Starts `furnace args...` with stdout and stderr appended to `log` and no CUDA variables;
// returns its pid.
inline pid_t spawn(const std::vector<std::string>& args, const std::filesystem::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    ::unsetenv("CUDA_DEVICE_ORDER");
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(FURNACE_CLI));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(FURNACE_CLI, argv.data());
    ::_exit(127);
  }
  return pid;
}

// The child's exit status; 128 + N when signal N ended it.
inline int wait_for(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace furnace::cli_test
