// Signals to a pipe (stop_signal_pipe.h). The handler only write()s one byte: async-signal-safe.
#include "machine/launch/stop_signal_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "furnace/error.h"

namespace furnace::launch {
namespace {

// One launcher per process: the handler needs the write end in a global.
volatile sig_atomic_t g_write_fd = -1;

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (g_write_fd >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(g_write_fd, &byte, 1);  // a full pipe drops it: SIGCHLD repeats
  }
  errno = saved;
}

}  // namespace

const std::vector<int>& StopSignalPipe::caught() {
  static const std::vector<int> kSignals{SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  return kSignals;
}

StopSignalPipe::StopSignalPipe() {
  FURNACE_CHECK(g_write_fd < 0) << "one launcher per process";
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw Error("cannot create a pipe for signals");
  read_fd_ = fds[0];
  g_write_fd = fds[1];
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (size_t i = 0; i < caught().size(); ++i) ::sigaction(caught()[i], &sa, &old_[i]);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
}

StopSignalPipe::~StopSignalPipe() {
  for (size_t i = 0; i < caught().size(); ++i) ::sigaction(caught()[i], &old_[i], nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  ::close(g_write_fd);
  g_write_fd = -1;
  ::close(read_fd_);
}

std::string StopSignalPipe::name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);  // glibc 2.32
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::vector<int> StopSignalPipe::take() {
  std::vector<int> sigs;
  unsigned char buf[64];
  ssize_t n;
  while ((n = ::read(read_fd_, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; ++i) sigs.push_back(buf[i]);
  return sigs;
}

void StopSignalPipe::restore_in_child() const {
  for (size_t i = 0; i < caught().size(); ++i) ::sigaction(caught()[i], &old_[i], nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
}

}  // namespace furnace::launch
