// The words both TOML readers (topology files, lesson files) use when they reject a value: the
// TOML type of what was found, and the allowed key nearest to a likely typo. Not here: making TOML
// text safe to parse (toml_guard.h), the readers' own rules.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <toml++/toml.h>  // defines: toml::node

namespace furnace {

// "a string", "an integer", "a float", "a boolean", "a table", "an array", "a date/time".
std::string toml_type_name(const toml::node& n);

// Levenshtein distance: single-character insertions, deletions and substitutions.
size_t edit_distance(std::string_view a, std::string_view b);

// The allowed name closest to `got` within 2 edits (the first of equals), or "" when none is.
template <class Names>
std::string nearest_name(std::string_view got, const Names& allowed) {
  std::string best;
  size_t best_d = 3;
  for (const auto& a : allowed) {
    const size_t d = edit_distance(got, a);
    if (d < best_d) best_d = d, best = std::string(a);
  }
  return best;
}

}  // namespace furnace
