// furnace/worker_group.h: torchrun's agent for one node: start `nproc_per_node` workers with the
// launch contract in their environment (furnace/launch_env.h), pass their output through with the
// rank in front of each line, forward Ctrl-C / SIGTERM / SIGHUP to them, and when one fails stop
// the others (SIGTERM, SIGKILL after a grace period). No restarts (torchrun --max-restarts 0).
// Not here: the command line (runtime/cli/launch_command.cpp), rendezvous and collectives (the
// workers' business).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "furnace/launch_env.h"  // defines: LaunchLayout

namespace furnace {

struct WorkerGroupOptions {
  LaunchLayout layout;                // checked with check_launch_layout; master_port already picked
  std::vector<std::string> command;   // each worker's argv; command[0] is looked up on PATH
  // Also set for every worker (e.g. OMP_NUM_THREADS), after the launcher's own environment.
  std::vector<std::pair<std::string, std::string>> extra_env;
  bool prefix_output = true;   // "[rank<RANK>]:" before each line; false: the workers write to
                               // the launcher's stdout and stderr directly
  double grace_period_s = 5;   // between SIGTERM and SIGKILL when launch stops the workers
};

// How one worker ended.
struct WorkerOutcome {
  enum class End { NotStarted, CouldNotStart, Exited, Signaled };
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  End end = End::NotStarted;
  int code = 0;  // the exit code (Exited), the signal (Signaled), execvp's errno (CouldNotStart)
  bool stopped_by_launch = false;   // still running when launch stopped the group
  bool killed_after_grace = false;  // launch sent SIGKILL once the grace period was over

  bool failed() const { return end == End::CouldNotStart || end == End::Signaled || (end == End::Exited && code != 0); }
};

struct WorkerGroupResult {
  std::vector<WorkerOutcome> workers;  // by local rank
  int first_failure = -1;  // local rank of the first worker that failed by itself; -1 when none did
  int stop_signal = 0;     // the first SIGINT / SIGTERM / SIGHUP launch received; 0 when none
  std::string command;     // command[0], for the report
  // The workers' output that launch could not pass on (prefixed lines to its stdout / stderr):
  // the errno of the first failed write, and which stream; 0 when all of it got through.
  int output_errno = 0;
  bool output_on_stderr = false;

  // 128 + stop_signal after a stop signal; 1 when a worker failed or its output was lost; otherwise 0.
  int exit_status() const;
};

// Throws furnace::Error (one line) when the launcher could not hold every worker's output pipes
// under this process's open-file limit (ulimit -n); run_worker_group asks it first.
void check_open_files(const WorkerGroupOptions& options);

// Runs the group until every worker has ended. Throws furnace::Error only when the launcher itself
// cannot work (no pipe, no fork); a worker that cannot be run is a failure in the result. While it
// runs it owns the process's SIGINT, SIGTERM, SIGHUP, SIGCHLD and SIGPIPE handlers (one group per
// process at a time) and reaps only its own children.
WorkerGroupResult run_worker_group(const WorkerGroupOptions& options);

// "exit code 3", "killed by signal 9 (SIGKILL)", "cannot run 'xyz': No such file or directory".
std::string describe_end(const WorkerOutcome& worker, const std::string& command);
// The report for stderr, each line starting "furnace launch: ": empty when all succeeded; after a
// failure the first failed rank ("rank 1 (local_rank 1, pid 12345) failed: exit code 3"), then one
// line per other started worker; after a stop signal, which signal, then one line per worker.
std::vector<std::string> group_report(const WorkerGroupResult& result, double grace_period_s);

}  // namespace furnace
