// furnace: the command-line tool. `furnace train`, `furnace memory`, ...
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli_arguments.h"  // defines: parse_arguments
#include "commands.h"
#include "furnace/address_limits.h"
#include "error_messages.h"  // defines: LocalizedError
#include "furnace/error.h"
#include "furnace/stop_signals.h"  // defines: ignore_file_size_signal

namespace {

// A command's report is only delivered once stdout has taken it: flush and close it, and turn a
// failure (a full disk, a closed pipe) into one line and status 1 instead of a silent success.
int delivered(int status) {
  errno = 0;
  bool failed = std::fflush(stdout) != 0 || std::ferror(stdout);
  int why = errno;
  if (std::fclose(stdout) != 0 && !failed) {
    failed = true;
    why = errno;
  }
  if (!failed) return status;
  // The failed write may have been an earlier flush (std::endl) whose errno is gone by now.
  std::fprintf(stderr, "furnace: error: cannot write to standard output: %s\n",
               why ? std::strerror(why) : "an earlier write to it failed");
  return status ? status : 1;
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"Furnace: learn and run multi-GPU training (CUDA runtime and multi-GPU simulator)",
               "furnace"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "furnace 0.1.0");
  furnace::cli::add_train_command(app);
  furnace::cli::add_memory_command(app);
  furnace::cli::add_devices_command(app);
  furnace::cli::add_smi_command(app);
  furnace::cli::add_scenario_command(app);
  furnace::cli::add_scaler_command(app);
  furnace::cli::add_scatter_command(app);
  furnace::cli::add_dp_loss_trap_command(app);
  furnace::cli::add_lesson_command(app);
  furnace::cli::add_compare_command(app);
  furnace::cli::add_launch_command(app);
  // CLI11 would answer an unknown command with "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) known = known || sub->check_name(argv[1]);
    if (!known) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
      std::fprintf(stderr, "furnace: error: unknown command '%s' (commands: %s)\n", argv[1], names.c_str());
      return 2;
    }
  }
  try {
    furnace::cli::parse_arguments(app, argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return delivered(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return delivered(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return delivered(app.exit(e));
  } catch (const furnace::cli::ExitCode& e) {
    return delivered(e.code);
  } catch (const CLI::ParseError& e) {
    // One line, the program's name first, a non-zero status (CLI11's own output is several lines);
    // a mistyped option is named, with the nearest one.
    std::string line = e.what();
    if (dynamic_cast<const CLI::ExtrasError*>(&e))
      if (std::string unknown = furnace::cli::unknown_option_line(app, argc, argv); !unknown.empty()) line = unknown;
    std::fprintf(stderr, "furnace: error: %s (see furnace --help)\n", line.c_str());
    return e.get_exit_code() ? e.get_exit_code() : 2;
  } catch (const furnace::cli::LocalizedError& e) {  // `--lang zh`: in the reader's language
    std::fprintf(stderr, "%s%s\n", e.prefix.c_str(), e.line.c_str());
    return 1;
  } catch (const furnace::Error& e) {
    std::fprintf(stderr, "furnace: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // No allocation of ours says how much it wanted here (the simulator's device memory does, in
    // its own message): say at least that it was the host, not a simulated GPU, that ran out.
    std::fprintf(stderr, "furnace: error: out of host memory: an allocation in this process failed "
                         "(std::bad_alloc); ulimit -v, the container's limit or the machine's RAM caps it\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "furnace: error: %s\n", e.what());
    return 1;
  }
  return delivered(0);
}

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write fails with EFBIG, which the writers report in one
  // line and clean up after ("cannot write trace file ...: File too large"), if SIGXFSZ does not
  // kill the process first, leaving a temporary file and no message.
  furnace::ignore_file_size_signal();
  const int status = run(argc, argv);
  // Under ulimit -v an OpenBLAS worker thread whose buffer could not be mapped retries for ever,
  // and exit() joins every worker (OpenBLAS's destructor): the process would hang after its error
  // line. The output is flushed and nothing else is left to do, so leave without the destructors.
  if (!furnace::address_space_limits().empty()) {
    std::fflush(nullptr);
    std::_Exit(status);
  }
  return status;
}
