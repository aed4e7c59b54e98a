// Stop signals as a flag (furnace/stop_signals.h). The handler does only async-signal-safe work:
// an atomic store, and _exit for a second signal or inside a StopAtOnce (write(2) first).
#include "furnace/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

namespace furnace {
namespace {

std::atomic<int> g_signal{0};
// Set by the StopAtOnce that owns them: the line's two halves (the signal's name between them),
// in static storage so the handler never reads a string being destroyed.
std::atomic<bool> g_at_once_claimed{false};  // a StopAtOnce is alive
std::atomic<bool> g_at_once{false};          // and has written the halves
char g_at_once_before[256];
char g_at_once_after[256];

void write_all(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, s, n);
}

void on_stop_signal(int sig) {
  int none = 0;
  const bool first = g_signal.compare_exchange_strong(none, sig);
  if (first) {
    if (g_at_once.load()) {
      write_all(g_at_once_before);
      write_all(stop_signal_name(sig));
      write_all(g_at_once_after);
      ::_exit(128 + sig);
    }
  }
  if (!first) {
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

StopAtOnce::StopAtOnce(const std::string& before, const std::string& after) {
  bool free = false;
  owner_ = g_at_once_claimed.compare_exchange_strong(free, true);
  if (!owner_) return;  // another is alive (threads of a test): it decides
  std::snprintf(g_at_once_before, sizeof g_at_once_before, "%s", before.c_str());
  std::snprintf(g_at_once_after, sizeof g_at_once_after, "%s", after.c_str());
  g_at_once = true;
}

StopAtOnce::~StopAtOnce() {
  if (!owner_) return;
  g_at_once = false;
  g_at_once_claimed = false;
}

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: {  // not reached from the handler, which only sees the three above
      static thread_local char buf[24];
      std::snprintf(buf, sizeof buf, "signal %d", sig);
      return buf;
    }
  }
}

namespace {
struct sigaction file_size_before;  // SIGXFSZ's disposition before ignore_file_size_signal()
bool file_size_saved = false;
}  // namespace

void ignore_file_size_signal() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  file_size_saved = ::sigaction(SIGXFSZ, &ignore, &file_size_before) == 0;
}

void restore_file_size_signal() {
  if (file_size_saved) ::sigaction(SIGXFSZ, &file_size_before, nullptr);
}

}  // namespace furnace
