// Stop signals as a flag (furnace/stop_signals.h). The handler does only async-signal-safe work:
// an atomic store, and for a second signal _exit.
#include "furnace/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace furnace {
namespace {

std::atomic<int> g_signal{0};

void on_stop_signal(int sig) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, sig)) {
    // A second request: the user does not want to wait for the step to finish.
    static const char kLine[] = "\nstopping now (second signal): no checkpoint saved\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, kLine, sizeof kLine - 1);
    ::_exit(128 + sig);
  }
}

}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and writes in flight carry on; the flag is polled
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

int stop_signal() { return g_signal.load(); }

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: {
      static thread_local char buf[24];
      std::snprintf(buf, sizeof buf, "signal %d", sig);
      return buf;
    }
  }
}

}  // namespace furnace
