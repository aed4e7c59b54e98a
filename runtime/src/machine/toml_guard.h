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

#include <string>
#include <string_view>

namespace furnace {

// The ASCII form of `text`; throws furnace::Error "<origin>:<line>:<column>: ..." (one line) for a
// non-ASCII character outside strings and comments, invalid UTF-8, or a non-ASCII character right
// after a backslash (TOML's escapes are all ASCII).
std::string toml_ascii(std::string_view text, const std::string& origin);

}  // namespace furnace
