// The launcher's signals as bytes on a pipe (the self-pipe trick), so its one poll() loop sees a
// Ctrl-C, a SIGTERM, a SIGHUP or a worker's exit (SIGCHLD) next to the workers' output. While one
// exists, SIGPIPE is ignored: a closed stdout must not kill the launcher with its workers running.
// The previous handlers come back when it is destroyed. Not here: what launch does with the
// signals (worker_group.cpp), the training's own stop flag (furnace/stop_signals.h).
#pragma once

#include <signal.h>

#include <string>
#include <vector>

namespace furnace::launch {

class StopSignalPipe {
 public:
  StopSignalPipe();
  ~StopSignalPipe();
  StopSignalPipe(const StopSignalPipe&) = delete;
  StopSignalPipe& operator=(const StopSignalPipe&) = delete;

  int read_fd() const { return read_fd_; }  // readable when a signal came
  // The signals received since the last call, in order (SIGCHLD included).
  std::vector<int> take();

  // The signals this pipe catches, and the ones that stop launch (SIGINT, SIGTERM, SIGHUP).
  static const std::vector<int>& caught();
  static bool is_stop(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }
  // "SIGKILL", "SIGTERM", ...; "signal 70" for a number without a name.
  static std::string name(int sig);

  // A child between fork and exec puts every signal back as the launcher found it, so the
  // command starts with the dispositions and mask its parent had (exec keeps ignored signals).
  void restore_in_child() const;

 private:
  int read_fd_ = -1;
  struct sigaction old_[8];
  struct sigaction old_pipe_;
};

}  // namespace furnace::launch
