// `furnace launch`: torchrun for furnace (and any program): starts --nproc-per-node workers on this
// node with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...), prefixes their output
// with their rank, forwards Ctrl-C, and stops them all when one fails. Exit status: 0 when every
// worker exits 0; 1 when one failed (the report names the first); 128 + N after signal N.
// Not here: the agent itself (furnace/worker_group.h), the contract (furnace/launch_env.h).
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"              // defines: add_launch_command, ExitCode
#include "furnace/error.h"         // defines: Error, FURNACE_CHECK
#include "furnace/launch_env.h"    // defines: LaunchLayout, check_launch_layout, pick_free_port
#include "furnace/worker_group.h"  // defines: run_worker_group, group_report

namespace furnace::cli {
namespace {

struct LaunchOptions {
  LaunchLayout layout;
  bool no_prefix = false;
  double grace_period_s = 5;
  std::vector<std::string> command;
};

// The word `furnace` runs this very binary, so a build tree or a test needs no furnace on PATH.
std::string resolve_program(const std::string& word) {
  if (word != "furnace") return word;
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : word;
}

void run(LaunchOptions o) {
  check_launch_layout(o.layout);
  FURNACE_CHECK(o.grace_period_s >= 0 && o.grace_period_s <= 3600)
      << "--grace-period must be in [0, 3600] seconds (got " << o.grace_period_s << ")";
  FURNACE_CHECK(!o.command.empty() && !o.command.front().empty())
      << "launch: no worker command: put it after --, e.g. furnace launch --nproc-per-node 2 -- furnace train --parallel ddp";
  if (o.layout.master_port == 0) o.layout.master_port = pick_free_port(o.layout.master_addr);

  WorkerGroupOptions group;
  group.layout = o.layout;
  group.command = o.command;
  group.command.front() = resolve_program(o.command.front());
  group.prefix_output = !o.no_prefix;
  group.grace_period_s = o.grace_period_s;
  check_open_files(group);  // before any output
  // torchrun's default and its warning: N workers each with all the cores would overload the node.
  if (o.layout.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS")) {
    group.extra_env.push_back({"OMP_NUM_THREADS", "1"});
    std::fprintf(stderr,
                 "*****************************************\n"
                 "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
                 "system being overloaded, please further tune the variable for optimal performance in your "
                 "application as needed. \n"
                 "*****************************************\n");
    std::fflush(stderr);
  }
  const WorkerGroupResult result = run_worker_group(group);
  for (const std::string& line : group_report(result, o.grace_period_s)) std::fprintf(stderr, "%s\n", line.c_str());
  if (result.output_errno)  // the workers may have succeeded, but what they printed did not arrive
    std::fprintf(stderr, "furnace launch: cannot write the workers' output to standard %s: %s\n",
                 result.output_on_stderr ? "error" : "output", std::strerror(result.output_errno));
  if (result.exit_status() != 0) throw ExitCode{result.exit_status()};
}

}  // namespace

void add_launch_command(CLI::App& app) {
  auto opts = std::make_shared<LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "start N worker processes with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...)");
  cmd->add_option("--nproc-per-node", opts->layout.nproc_per_node, "workers on this node")->capture_default_str();
  cmd->add_option("--nnodes", opts->layout.nnodes, "nodes in the job (each runs its own furnace launch)")
      ->capture_default_str();
  cmd->add_option("--node-rank", opts->layout.node_rank, "this node's rank, 0 .. nnodes-1 (GROUP_RANK)")
      ->capture_default_str();
  cmd->add_option("--master-addr", opts->layout.master_addr, "address of node 0, where rank 0 hosts the store")
      ->capture_default_str();
  cmd->add_option("--master-port", opts->layout.master_port, "port of rank 0's store; 0 picks a free one (one node only)")
      ->capture_default_str();
  cmd->add_option("--rdzv-id", opts->layout.run_id, "the job's id, TORCHELASTIC_RUN_ID (the same on every node)")
      ->capture_default_str();
  cmd->add_option("--grace-period", opts->grace_period_s,
                  "seconds between SIGTERM and SIGKILL when launch stops the workers")
      ->capture_default_str();
  cmd->add_flag("--no-prefix", opts->no_prefix, "let the workers write straight to this terminal (no [rankN]: prefix)");
  cmd->add_option("command", opts->command, "the worker command and its arguments (best after --)");
  // From the first word that is not one of launch's flags (or from --) on, every word is the worker's.
  cmd->positionals_at_end();
  cmd->footer(
      "The worker command follows the flags, best after -- (`furnace` runs this furnace).\n"
      "Examples:\n"
      "  furnace launch --nproc-per-node 4 -- furnace train --parallel ddp --topology workstation-4x3090\n"
      "  furnace launch --nproc-per-node 2 -- sh -c 'echo $RANK of $WORLD_SIZE'\n"
      "  (node 0 of 2) furnace launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 2 -- ...");
  cmd->callback([opts] { run(*opts); });
}

}  // namespace furnace::cli
