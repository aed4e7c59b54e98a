// furnace/stop_signals.h: Ctrl-C, SIGTERM (a scheduler's time limit) and SIGHUP (a closed
// terminal) as a request to stop. The first one only sets a flag that the program polls where it
// can stop cleanly (`furnace train` after the current step, with a final checkpoint; furnace-viz
// by closing its window); a second one ends the process at once with status 128 + N.
// Not here: what stopping means for each program (runtime/cli/train_command.cpp, visualizer/app).
#pragma once

#include <string>

namespace furnace {

// Installs the handlers for SIGINT, SIGTERM and SIGHUP (process-wide, any thread may receive them).
void install_stop_signals();
// The first stop signal received (SIGINT, SIGTERM or SIGHUP), or 0 while none has come.
int stop_signal();
// "SIGINT", "SIGTERM", "SIGHUP", or "signal N".
const char* stop_signal_name(int sig);

// Ignores SIGXFSZ: past a file-size limit (ulimit -f) a write then fails with EFBIG, which the
// writers report in one line and clean up after, instead of the signal killing the process
// silently and leaving a temporary file. The disposition it replaced is kept for
// restore_file_size_signal(), which a forked child calls before exec (async-signal-safe), so that
// a launched worker starts with what furnace's own parent gave it.
void ignore_file_size_signal();
void restore_file_size_signal();

// While one is alive, the first stop signal ends the process at once (status 128 + N) after the
// line `before` + the signal's name + `after` on stderr: for a blocking call of a library that
// never polls the flag (Gloo's connectFullMesh), where there is nothing to save yet. While one is
// alive a second one does nothing (each line at most 255 bytes).
class StopAtOnce {
 public:
  StopAtOnce(const std::string& before, const std::string& after);
  ~StopAtOnce();
  StopAtOnce(const StopAtOnce&) = delete;
  StopAtOnce& operator=(const StopAtOnce&) = delete;

 private:
  bool owner_ = false;
};

}  // namespace furnace
