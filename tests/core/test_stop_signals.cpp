// furnace/stop_signals.h in a child process each: the first stop signal only sets the flag, the
// second ends the process; inside a StopAtOnce the first one ends it at once with the guard's
// line; a second guard alive at the same time changes nothing; once the guard is gone the flag
// is back.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>

#include "furnace/stop_signals.h"

namespace furnace {
namespace {

struct Child {
  int status = -1;  // as waitpid reports it
  std::string err;
};

// Runs `body` in a forked child whose stderr is captured; the child ends with _exit(0) after it.
Child in_child(const std::function<void()>& body) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], STDERR_FILENO);
    ::close(pipe_fds[0]);
    body();
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  Child c;
  char buf[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) c.err.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  ::waitpid(pid, &c.status, 0);
  return c;
}

TEST(StopSignals, TheFirstSignalIsAFlagAndTheSecondEndsTheProcess) {
  const Child c = in_child([] {
    install_stop_signals();
    ::raise(SIGTERM);
    if (stop_signal() != SIGTERM) ::_exit(3);
    ::raise(SIGINT);
    ::_exit(4);  // not reached
  });
  ASSERT_TRUE(WIFEXITED(c.status));
  EXPECT_EQ(WEXITSTATUS(c.status), 128 + SIGINT);
  EXPECT_EQ(c.err, "\nstopping now (second signal): no checkpoint saved\n");
}

TEST(StopSignals, InsideAStopAtOnceTheFirstSignalEndsTheProcessWithItsLine) {
  const Child c = in_child([] {
    install_stop_signals();
    const StopAtOnce at_once("furnace: error: rank 1 of 4 stopped by ", " while connecting\n");
    const StopAtOnce second("something else ", " entirely\n");  // alive at the same time: ignored
    ::raise(SIGTERM);
    ::_exit(4);  // not reached
  });
  ASSERT_TRUE(WIFEXITED(c.status));
  EXPECT_EQ(WEXITSTATUS(c.status), 128 + SIGTERM);
  EXPECT_EQ(c.err, "furnace: error: rank 1 of 4 stopped by SIGTERM while connecting\n");
}

TEST(StopSignals, OnceTheStopAtOnceIsGoneTheSignalIsAFlagAgain) {
  const Child c = in_child([] {
    install_stop_signals();
    { const StopAtOnce at_once("never ", " printed\n"); }
    ::raise(SIGHUP);
    ::_exit(stop_signal() == SIGHUP ? 0 : 3);
  });
  ASSERT_TRUE(WIFEXITED(c.status));
  EXPECT_EQ(WEXITSTATUS(c.status), 0);
  EXPECT_EQ(c.err, "");
}

}  // namespace
}  // namespace furnace
