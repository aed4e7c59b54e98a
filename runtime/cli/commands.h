// The `furnace` subcommands. Each registers itself on the app; its callback throws furnace::Error
// on bad input, and main() turns that into one line on stderr and exit status 1.
#pragma once

#include <CLI/CLI.hpp>


namespace furnace::cli {

void add_train_command(CLI::App& app);
void add_memory_command(CLI::App& app);
void add_devices_command(CLI::App& app);   // devices_command.cpp
void add_smi_command(CLI::App& app);       // smi_command.cpp
void add_scenario_command(CLI::App& app);  // scenario_command.cpp

void add_scaler_command(CLI::App& app);
void add_scatter_command(CLI::App& app);       // scatter_command.cpp
void add_dp_loss_trap_command(CLI::App& app);  // dp_loss_trap_command.cpp
void add_lesson_command(CLI::App& app);        // lesson_command.cpp
void add_compare_command(CLI::App& app);       // compare_command.cpp
void add_launch_command(CLI::App& app);        // launch_command.cpp

// Thrown by a command that has printed its own report to end with this exit status (e.g.
// `furnace lesson check`: 1 when a check failed, 2 when a lesson did not load); main() returns it.
struct ExitCode {
  int code;
};

}  // namespace furnace::cli
