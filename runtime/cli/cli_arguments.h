// cli/cli_arguments: two corrections to how CLI11 reads an empty value, shared by `furnace` and
// `furnace-viz` (header-only: the visualizer does not link the CLI's objects).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace furnace::cli {

// CLI11 reads `--name=` (nothing after the '=') as the option without a value and takes the next
// argument as its value: `--device-ids= --steps 2` would set device_ids to "--steps" and leave
// "2" unexpected. Given as `--name ""`, the empty value reaches the option (which then judges it,
// as `--device-ids ''` is "list index out of range"). After a lone `--` nothing is an option.
inline std::vector<std::string> empty_values_explicit(int argc, char** argv) {
  std::vector<std::string> out;
  bool options = true;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") options = false;
    if (options && i > 0 && a.size() > 3 && a.rfind("--", 0) == 0 && a.find('=') == a.size() - 1) {
      out.push_back(a.substr(0, a.size() - 1));
      out.emplace_back();
      continue;
    }
    out.push_back(a);
  }
  return out;
}

// CLI11 converts an empty value to a number as 0, so `--lr=` was "--lr must be in (0, 100) (got
// 0)": every numeric option of `app` and its subcommands refuses an empty value before conversion
// ("--lr: an empty value is not a number", CLI11's status 105).
inline void refuse_empty_numbers(CLI::App& app) {
  const CLI::Validator not_empty(
      [](std::string& value) { return value.empty() ? std::string("an empty value is not a number") : std::string(); },
      "");
  for (CLI::Option* opt : app.get_options()) {
    std::string type = opt->get_type_name();  // "FLOAT", or "UINT:UINT64" with a validator's name
    type = type.substr(0, type.find(':'));
    if (type == "FLOAT" || type == "INT" || type == "UINT" || type == "NUMBER") opt->check(not_empty);
  }
  for (CLI::App* sub : app.get_subcommands({})) refuse_empty_numbers(*sub);
}

// Parses argv with both corrections.
inline void parse_arguments(CLI::App& app, int argc, char** argv) {
  refuse_empty_numbers(app);
  std::vector<std::string> args = empty_values_explicit(argc, argv);
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  app.parse(static_cast<int>(ptrs.size()), ptrs.data());
}

}  // namespace furnace::cli
