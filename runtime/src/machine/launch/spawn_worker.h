// Starting one worker: fork, then in the child a session of its own (setsid), the given stdout and
// stderr, and execvp of the command with the given environment. Not here: watching it
// (worker_group.cpp).
//
// Why a session of its own, as torchrun's workers have: Ctrl-C in a terminal reaches the
// terminal's foreground process group, which is the launcher's; the launcher forwards it, once,
// to each worker's whole group, so a worker's own children (a shell's commands) get it too and
// nothing is signalled twice. On Linux the worker also gets SIGTERM should the launcher die
// without stopping it (killed by SIGKILL).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace furnace::launch {

class StopSignalPipe;

struct SpawnResult {
  pid_t pid = -1;     // the child (reaped by the caller, also when exec failed)
  int exec_errno = 0; // execvp's errno when the command could not be run; 0 when it runs
};

// `argv` (argv[0] looked up on PATH) and `envp` ("NAME=value") as the worker's; `out_fd` and
// `err_fd` become its stdout and stderr (-1: keep the launcher's). Throws furnace::Error when fork
// fails.
SpawnResult spawn_worker(const std::vector<std::string>& argv, const std::vector<std::string>& envp, int out_fd,
                         int err_fd, const StopSignalPipe& signals);

}  // namespace furnace::launch
