// furnace/stop_signals.h: Ctrl-C, SIGTERM (a scheduler's time limit) and SIGHUP (a closed
// terminal) as a request to stop. The first one only sets a flag that the program polls where it
// can stop cleanly (`furnace train` after the current step, with a final checkpoint; furnace-viz
// by closing its window); a second one ends the process at once with status 128 + N.
// Not here: what stopping means for each program (runtime/cli/train_command.cpp, visualizer/app).
#pragma once

namespace furnace {

// Installs the handlers for SIGINT, SIGTERM and SIGHUP (process-wide, any thread may receive them).
void install_stop_signals();
// The first stop signal received (SIGINT, SIGTERM or SIGHUP), or 0 while none has come.
int stop_signal();
// "SIGINT", "SIGTERM", "SIGHUP", or "signal N".
const char* stop_signal_name(int sig);

}  // namespace furnace
