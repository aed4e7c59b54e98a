// fork + execvp of one worker (spawn_worker.h). Between fork and exec the child calls only
// async-signal-safe functions; everything it needs is built before the fork.
#include "machine/launch/spawn_worker.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <cstring>

#include "furnace/error.h"
#include "furnace/stop_signals.h"  // defines: restore_file_size_signal
#include "machine/launch/stop_signal_pipe.h"

namespace furnace::launch {
namespace {

std::vector<char*> c_strings(const std::vector<std::string>& words) {
  std::vector<char*> out;
  for (const std::string& w : words) out.push_back(const_cast<char*>(w.c_str()));
  out.push_back(nullptr);
  return out;
}

[[noreturn]] void fail_in_child(int report_fd) {
  const int e = errno;
  [[maybe_unused]] const ssize_t n = ::write(report_fd, &e, sizeof e);
  ::_exit(127);
}

}  // namespace

SpawnResult spawn_worker(const std::vector<std::string>& argv, const std::vector<std::string>& envp, int out_fd,
                         int err_fd, const StopSignalPipe& signals) {
  std::vector<char*> args = c_strings(argv), env = c_strings(envp);
  // exec closes the write end (O_CLOEXEC): EOF means the command runs; an int means it did not.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
  // No handler may run in the child before its dispositions are restored.
  sigset_t all, before;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &before);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    signals.restore_in_child();
    restore_file_size_signal();  // furnace ignores SIGXFSZ; the worker gets what furnace was given
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::setsid();
#ifdef __linux__
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);  // the launcher is already gone
#endif
    if ((out_fd >= 0 && ::dup2(out_fd, STDOUT_FILENO) < 0) || (err_fd >= 0 && ::dup2(err_fd, STDERR_FILENO) < 0))
      fail_in_child(report[1]);
    ::execvpe(args[0], args.data(), env.data());
    fail_in_child(report[1]);
  }
  const int fork_errno = errno;
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    throw Error(std::string("cannot start a worker: fork: ") + std::strerror(fork_errno));
  }
  SpawnResult r;
  r.pid = pid;
  ssize_t n;
  do n = ::read(report[0], &r.exec_errno, sizeof r.exec_errno);
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof r.exec_errno)) r.exec_errno = 0;
  ::close(report[0]);
  return r;
}

}  // namespace furnace::launch
