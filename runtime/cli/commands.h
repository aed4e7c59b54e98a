// The `furnace` subcommands. Each registers itself on the app; its callback throws furnace::Error
// on bad input, and main() turns that into one line on stderr and exit status 1.
#pragma once

#include <CLI/CLI.hpp>

namespace furnace::cli {

void add_train_command(CLI::App& app);
void add_memory_command(CLI::App& app);
void add_scaler_command(CLI::App& app);

}  // namespace furnace::cli
