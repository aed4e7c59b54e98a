// furnace/toml_reader.h: what every TOML reader (topology files, lesson files) shares: the text
// made safe to parse, and the words for rejecting a value.
//
// TOML text made safe for Debian's toml++ 3.3.0 before it parses it. There, a non-ASCII code
// point in U+00A1..U+0499, U+2D0E..U+3107 or U+FB36..U+FEFE (accents, Greek, Cyrillic, CJK
// punctuation such as "。" and "、", Arabic presentation forms) reaches TOML_UNREACHABLE,
// undefined behaviour, wherever the parser asks "is this whitespace?": after a line-ending backslash in a """ string, and while scanning a malformed
// value up to 127 characters ahead, into strings and comments (marzer/tomlplusplus #190 and #295,
// fixed upstream after 3.3.0; found by tests/fuzz/fuzz_topology.cpp).
//
// The way around it: toml++ never sees a non-ASCII byte. toml_ascii() rewrites the text into the
// same TOML document in ASCII: in basic strings ("..." and """...""") each non-ASCII character
// becomes its \uXXXX or \UXXXXXXXX escape; literal strings ('...' and '''...''') become basic
// strings with the same value; in comments each non-ASCII character becomes '?'. Outside strings
// and comments TOML allows no non-ASCII character at all, so one there is an error, as is invalid
// UTF-8. Lines keep their numbers, so toml++'s "file:line" errors still point at the right line.
// Used by every TOML reader (topology files, lesson files). Not here: the TOML grammar.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <toml++/toml.h>  // defines: toml::node

namespace furnace {


// The ASCII form of `text`; throws furnace::Error "<origin>:<line>:<column>: ..." (one line) for a
// non-ASCII character outside strings and comments, invalid UTF-8, or a non-ASCII character right
// after a backslash (TOML's escapes are all ASCII).
std::string toml_ascii(std::string_view text, const std::string& origin);

// ---- the words a reader uses when it rejects a value ----------------------------------------


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
