// cli/cli_arguments: two corrections to how CLI11 reads an empty value, shared by `furnace` and
// `furnace-viz` (header-only: the visualizer does not link the CLI's objects).
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "furnace/toml_reader.h"  // defines: nearest_name (the TOML readers' "did you mean")

namespace furnace::cli {

// The options `--name` may be at argv[i]: those of the command chain argv[1..i) selects (a
// subcommand name descends into it; `lesson run`) and of the commands above it.
inline std::vector<const CLI::Option*> options_in_scope(CLI::App& app, int i, char** argv) {
  std::vector<CLI::App*> chain{&app};
  for (int k = 1; k < i; ++k) {
    const std::string a = argv[k];
    if (a == "--") break;
    if (a.rfind("-", 0) == 0) continue;
    for (CLI::App* sub : chain.back()->get_subcommands({}))
      if (sub->check_name(a)) {
        chain.push_back(sub);
        break;
      }
  }
  std::vector<const CLI::Option*> out;
  for (CLI::App* c : chain)
    for (const CLI::Option* opt : c->get_options()) out.push_back(opt);
  return out;
}

// CLI11 reads `--name=` (nothing after the '=') as the option without a value and takes the next
// argument as its value: `--device-ids= --steps 2` would set device_ids to "--steps" and leave
// "2" unexpected. Given as `--name ""`, the empty value reaches the option (which then judges it,
// as `--device-ids ''` is "list index out of range"). A flag's `--name=` is left to CLI11 (it
// sets the flag). After a lone `--` nothing is an option.
inline std::vector<std::string> empty_values_explicit(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> out;
  bool options = true;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") options = false;
    if (options && i > 0 && a.size() > 3 && a.rfind("--", 0) == 0 && a.find('=') == a.size() - 1) {
      const std::string name = a.substr(2, a.size() - 3);
      bool flag = false;
      for (const CLI::Option* opt : options_in_scope(app, i, argv))
        if (opt->check_lname(name)) flag = opt->get_expected_max() == 0;
      if (!flag) {
        out.push_back(a.substr(0, a.size() - 1));
        out.emplace_back();
        continue;
      }
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

// For CLI11's "The following argument was not expected: dgx-h100 --topolgy": the first `--name`
// in argv that neither the command it follows nor the commands above it know, as "unknown option
// --topolgy (did you mean --topology?)" (the nearest name within two edits); "" when every
// option is known (the extra argument is a stray value).
inline std::string unknown_option_line(CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a.rfind("--", 0) != 0) continue;
    const std::string name = a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
    std::vector<std::string> known;
    for (const CLI::Option* opt : options_in_scope(app, i, argv))
      for (const std::string& l : opt->get_lnames()) known.push_back(l);
    if (name.empty() || std::find(known.begin(), known.end(), name) != known.end()) continue;
    const std::string best = nearest_name(name, known);
    return "unknown option --" + name + (best.empty() ? "" : " (did you mean --" + best + "?)");
  }
  return "";
}

// Parses argv with both corrections.
inline void parse_arguments(CLI::App& app, int argc, char** argv) {
  refuse_empty_numbers(app);
  std::vector<std::string> args = empty_values_explicit(app, argc, argv);
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  app.parse(static_cast<int>(ptrs.size()), ptrs.data());
}

}  // namespace furnace::cli
