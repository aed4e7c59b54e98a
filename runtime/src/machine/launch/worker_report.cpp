// The words of launch's report (furnace/worker_group.h): how each worker ended, and the lines
// printed after a failure or a stop signal.
#include <cstdio>
#include <cstring>

#include "furnace/error.h"
#include "furnace/worker_group.h"
#include "machine/launch/stop_signal_pipe.h"

namespace furnace {
namespace {

std::string who(const WorkerOutcome& w) {
  return "rank " + std::to_string(w.rank) + " (local_rank " + std::to_string(w.local_rank) + ", pid " +
         std::to_string(w.pid) + ")";
}

std::string how_it_ended(const WorkerOutcome& w, const std::string& command, double grace_s) {
  std::string text = describe_end(w, command);
  if (w.killed_after_grace) {
    char grace_text[64];
    std::snprintf(grace_text, sizeof grace_text, " after the %g s grace period", grace_s);
    text += grace_text;
  }
  return w.stopped_by_launch ? "stopped by launch: " + text : text;
}

}  // namespace

std::string describe_end(const WorkerOutcome& w, const std::string& command) {
  switch (w.end) {
    case WorkerOutcome::End::NotStarted: return "not started";
    case WorkerOutcome::End::CouldNotStart:
      return "cannot run '" + printable_clipped(command) + "': " + std::strerror(w.code);
    case WorkerOutcome::End::Exited: return "exit code " + std::to_string(w.code);
    case WorkerOutcome::End::Signaled:
      return "killed by signal " + std::to_string(w.code) + " (" + launch::StopSignalPipe::name(w.code) + ")";
  }
  return "?";
}

std::vector<std::string> group_report(const WorkerGroupResult& r, double grace_s) {
  std::vector<std::string> lines;
  const std::string head = "furnace launch: ";
  if (r.stop_signal) {
    lines.push_back(head + "stopped by " + launch::StopSignalPipe::name(r.stop_signal) + " (exit status " +
                    std::to_string(r.exit_status()) + ")");
  } else if (r.first_failure >= 0) {
    const WorkerOutcome& first = r.workers[static_cast<size_t>(r.first_failure)];
    if (first.end == WorkerOutcome::End::CouldNotStart)  // nothing of it ran: no pid to name
      lines.push_back(head + "rank " + std::to_string(first.rank) + ": " + describe_end(first, r.command));
    else
      lines.push_back(head + who(first) + " failed: " + describe_end(first, r.command));
  } else {
    return lines;
  }
  for (const WorkerOutcome& w : r.workers) {
    if (w.end == WorkerOutcome::End::NotStarted || (!r.stop_signal && w.local_rank == r.first_failure)) continue;
    lines.push_back(head + "  " + who(w) + ": " + how_it_ended(w, r.command, grace_s));
  }
  return lines;
}

}  // namespace furnace
