// The agent's loop (furnace/worker_group.h): start the workers, then one poll() over their output
// pipes and the signal pipe until every worker is reaped. Not here: the report's words
// (worker_report.cpp), fork/exec (spawn_worker.cpp).
#include "furnace/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "furnace/error.h"
#include "machine/launch/group_members.h"
#include "machine/launch/line_prefixer.h"
#include "machine/launch/spawn_worker.h"
#include "machine/launch/stop_signal_pipe.h"

extern char** environ;

namespace furnace {

// With prefixed output the launcher holds two pipes per worker: more workers than the open-file
// limit allows would fail part-way ("Too many open files") after minutes of starting them.
void check_open_files(const WorkerGroupOptions& options) {
  if (!options.prefix_output) return;
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return;
  // What is open already (stdio, the signal pipe, ...), and while a worker starts its two write
  // ends and the report pipe.
  long long open_now = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++open_now;
  const long long spare = (ec ? 16 : open_now) + 4;
  const long long limit = static_cast<long long>(lim.rlim_cur);
  if (2LL * options.layout.nproc_per_node + spare > limit)
    throw Error("--nproc-per-node " + std::to_string(options.layout.nproc_per_node) + ": each worker's output " +
                "takes 2 open files here, and this process may open " + std::to_string(lim.rlim_cur) +
                " (ulimit -n): at most " + std::to_string(std::max(0LL, (limit - spare) / 2)) + " workers, or --no-prefix");
}

namespace {

using Clock = std::chrono::steady_clock;
using launch::LinePrefixer;

// One worker's output pipe as the launcher reads it.
struct Stream {
  int fd = -1;
  std::unique_ptr<LinePrefixer> lines;
};

struct Worker {
  WorkerOutcome outcome;
  bool running = false;
  Stream out, err;
};

// The launcher's environment with `vars` set over it, as "NAME=value" words.
std::vector<std::string> environment_with(const std::vector<std::pair<std::string, std::string>>& vars) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string word = *e;
    const std::string name = word.substr(0, word.find('='));
    const bool replaced = std::any_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
    if (!replaced) env.push_back(word);
  }
  for (const auto& [name, value] : vars) env.push_back(name + "=" + value);
  return env;
}

// A pipe whose read end (non-blocking, close-on-exec) stays with the launcher; returns the write
// end for the child.
int open_stream(Stream& s, const std::string& prefix, int launcher_fd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(std::string("cannot create a pipe: ") + std::strerror(errno));
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  s.fd = fds[0];
  s.lines = std::make_unique<LinePrefixer>(prefix, launcher_fd);
  return fds[1];
}

// Reads what is in the pipe now (at most `budget` bytes); closes it at end of file.
void pump(Stream& s, size_t budget = SIZE_MAX) {
  char buf[16384];
  while (s.fd >= 0 && budget > 0) {
    const ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n > 0) {
      s.lines->feed(buf, static_cast<size_t>(n));
      budget -= std::min(budget, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        s.lines->finish();
        ::close(s.fd);
        s.fd = -1;
      }
      return;
    }
  }
}

// The worker has exited: what it wrote is all in the pipe by now. A child it left running may
// still hold the pipe; what that child writes later is not waited for.
void close_stream(Stream& s) {
  pump(s, 4 << 20);
  if (s.fd >= 0) {
    s.lines->finish();
    ::close(s.fd);
    s.fd = -1;
  }
}

class Agent {
 public:
  explicit Agent(const WorkerGroupOptions& o) : options_(o) {}

  WorkerGroupResult run() {
    check_launch_layout(options_.layout);
    FURNACE_CHECK(!options_.command.empty()) << "no worker command";
    result_.command = options_.command.front();
    workers_.resize(static_cast<size_t>(options_.layout.nproc_per_node));
    for (int l = 0; l < options_.layout.nproc_per_node; ++l) {
      workers_[l].outcome.local_rank = l;
      workers_[l].outcome.rank = options_.layout.global_rank(l);
    }
    check_open_files(options_);
    for (Worker& w : workers_) {
      start(w);
      if (w.outcome.end == WorkerOutcome::End::CouldNotStart) {
        result_.first_failure = w.outcome.local_rank;
        stop_all(SIGTERM);
        break;
      }
      // Starting thousands of workers takes seconds: a Ctrl-C meanwhile stops the starting too.
      bool stop = false;
      for (int sig : signals_.take())
        if (launch::StopSignalPipe::is_stop(sig)) {
          forward(sig);
          stop = true;
        }
      if (stop) break;
    }
    reap_ended();  // take() above also took the SIGCHLDs of workers that ended while others started
    // After a stop, also until what the workers started is gone, or the grace period is over.
    while (std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; }) ||
           (kill_at_ && any_group_left()))
      step();
    for (const Worker& w : workers_) {
      result_.workers.push_back(w.outcome);
      for (const Stream* st : {&w.out, &w.err})
        if (!result_.output_errno && st->lines && st->lines->write_error()) {
          result_.output_errno = st->lines->write_error();
          result_.output_on_stderr = st == &w.err;
        }
    }
    return result_;
  }

 private:
  void start(Worker& w) {
    auto env = worker_environment(options_.layout, w.outcome.local_rank);
    env.insert(env.end(), options_.extra_env.begin(), options_.extra_env.end());
    int child_out = -1, child_err = -1;
    if (options_.prefix_output) {
      const std::string prefix = "[rank" + std::to_string(w.outcome.rank) + "]:";
      child_out = open_stream(w.out, prefix, STDOUT_FILENO);
      child_err = open_stream(w.err, prefix, STDERR_FILENO);
    }
    launch::SpawnResult r;
    try {
      r = launch::spawn_worker(options_.command, environment_with(env), child_out, child_err, signals_);
    } catch (...) {
      if (child_out >= 0) ::close(child_out);
      if (child_err >= 0) ::close(child_err);
      throw;
    }
    if (child_out >= 0) ::close(child_out);
    if (child_err >= 0) ::close(child_err);
    w.outcome.pid = r.pid;
    w.running = true;
    if (r.exec_errno != 0) {
      reap_blocking(w);
      w.outcome.end = WorkerOutcome::End::CouldNotStart;
      w.outcome.code = r.exec_errno;
      w.outcome.pid = -1;  // reaped, and nothing of it runs: no group to signal
    }
  }

  void reap_blocking(Worker& w) {
    int status;
    while (::waitpid(w.outcome.pid, &status, 0) < 0 && errno == EINTR) {
    }
    ended(w, status);
  }

  void ended(Worker& w, int status) {
    w.running = false;
    if (WIFSIGNALED(status)) {
      w.outcome.end = WorkerOutcome::End::Signaled;
      w.outcome.code = WTERMSIG(status);
    } else {
      w.outcome.end = WorkerOutcome::End::Exited;
      w.outcome.code = WEXITSTATUS(status);
    }
    close_stream(w.out);
    close_stream(w.err);
    // Launch is stopping the workers: what this one started (a shell's background job, which
    // ignores SIGINT) is an orphan now; it gets SIGTERM, then SIGKILL with the rest.
    if (grace_started_) ::killpg(w.outcome.pid, SIGTERM);
  }

  // Whether a process of some worker's process group (its session) is still there.
  bool any_group_left() const {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const Worker& w) { return w.outcome.pid > 0 && launch::group_has_live_process(w.outcome.pid); });
  }

  // One round: wait for output, a signal or the SIGKILL deadline; then act on all three.
  void step() {
    std::vector<pollfd> fds{{signals_.read_fd(), POLLIN, 0}};
    std::vector<Stream*> streams;
    for (Worker& w : workers_)
      for (Stream* s : {&w.out, &w.err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          streams.push_back(s);
        }
    // SIGCHLD wakes the poll; the timeout only covers a signal lost to a full signal pipe.
    int timeout_ms = 200;
    if (kill_at_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, timeout_ms));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR)
      throw Error(std::string("poll: ") + std::strerror(errno));
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) pump(*streams[i - 1]);
    for (int sig : signals_.take())
      if (launch::StopSignalPipe::is_stop(sig)) forward(sig);
    reap_ended();
    if (kill_at_ && Clock::now() >= *kill_at_) {
      for (Worker& w : workers_) {
        if (w.outcome.pid > 0) ::killpg(w.outcome.pid, SIGKILL);
        if (w.running) w.outcome.killed_after_grace = true;
      }
      kill_at_.reset();
    }
  }

  void reap_ended() {
    for (Worker& w : workers_) {
      if (!w.running) continue;
      int status;
      const pid_t p = ::waitpid(w.outcome.pid, &status, WNOHANG);
      if (p != w.outcome.pid) continue;
      ended(w, status);
      if (w.outcome.failed() && result_.first_failure < 0 && !w.outcome.stopped_by_launch) {
        result_.first_failure = w.outcome.local_rank;
        stop_all(SIGTERM);
      }
    }
  }

  // Ctrl-C and friends go to every worker as they came; each one (a second Ctrl-C too) is passed on.
  void forward(int sig) {
    if (result_.stop_signal == 0) {
      result_.stop_signal = sig;
      const int running = static_cast<int>(std::count_if(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; }));
      std::fprintf(stderr, "furnace launch: received %s: passing it to %d running worker%s (SIGKILL in %g s if still running)\n",
                   launch::StopSignalPipe::name(sig).c_str(), running, running == 1 ? "" : "s", options_.grace_period_s);
      std::fflush(stderr);
    }
    stop_all(sig);
  }

  // `sig` to every worker's whole process group, also of a worker that has ended (what it left
  // running); the SIGKILL deadline starts with the first stop.
  void stop_all(int sig) {
    for (Worker& w : workers_) {
      if (w.outcome.pid > 0) ::killpg(w.outcome.pid, sig);
      if (w.running) w.outcome.stopped_by_launch = true;
    }
    if (!kill_at_ && !grace_started_) {
      grace_started_ = true;
      kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(std::max(0.0, options_.grace_period_s)));
    }
  }

  const WorkerGroupOptions& options_;
  launch::StopSignalPipe signals_;
  std::vector<Worker> workers_;
  WorkerGroupResult result_;
  std::optional<Clock::time_point> kill_at_;  // when what is left of the workers gets SIGKILL
  bool grace_started_ = false;
};

}  // namespace

int WorkerGroupResult::exit_status() const {
  if (stop_signal) return 128 + stop_signal;
  const bool any_failed = first_failure >= 0 || std::any_of(workers.begin(), workers.end(), [](const WorkerOutcome& w) { return w.failed(); });
  return any_failed || output_errno ? 1 : 0;
}

WorkerGroupResult run_worker_group(const WorkerGroupOptions& options) { return Agent(options).run(); }

}  // namespace furnace
