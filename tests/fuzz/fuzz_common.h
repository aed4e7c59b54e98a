// What every Furnace fuzz target checks, whatever it parses: an input is accepted, or it is
// rejected with a furnace::Error whose message is one clear line (not empty, no control
// character: it is printed as is after "furnace: error: "). Any other exception, a crash, a
// sanitizer report or a broken invariant aborts, and libFuzzer saves the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "furnace/error.h"

namespace furnace::fuzz {

// Aborts (a finding) when `ok` is false.
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

// A rejection message users see: one line of text.
inline void require_one_line(const std::string& message) {
  require(!message.empty(), "an error message is not empty");
  for (char c : message) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      std::fprintf(stderr, "error message with control character 0x%02x: %s\n", u, message.c_str());
      std::abort();
    }
  }
}

// Runs `parse`: returns true when it accepted the input, false when it threw furnace::Error with a
// one-line message; anything else thrown is a finding.
template <class Parse>
bool accepts(Parse&& parse) {
  try {
    parse();
    return true;
  } catch (const Error& e) {
    require_one_line(e.what());
    return false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "not a furnace::Error: %s\n", e.what());
    std::abort();
  }
}

}  // namespace furnace::fuzz
