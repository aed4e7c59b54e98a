// Error construction and the thrower behind FURNACE_CHECK.
#include "furnace/error.h"

#include <cstdio>

namespace furnace {

Error::Error(std::string message, std::string statement, const char* file, int line, int device)
    : std::runtime_error(message),
      message_(std::move(message)),
      statement_(std::move(statement)),
      file_(file ? file : ""),
      line_(line),
      device_(device) {}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string printable_clipped(std::string_view text, size_t max) {
  if (text.size() <= max) return printable(text);
  return printable(text.substr(0, max)) + "... (" + std::to_string(text.size()) + " bytes)";
}

size_t find_terminal_control(std::string_view text, size_t* length) {
  auto at = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  for (size_t i = 0; i < text.size(); ++i) {
    size_t n = 0;
    const unsigned char c = at(i);
    if (c < 0x20 || c == 0x7f) n = 1;
    else if (c == 0xC2 && i + 1 < text.size() && at(i + 1) >= 0x80 && at(i + 1) <= 0x9F) n = 2;  // C1
    else if (c == 0xD8 && i + 1 < text.size() && at(i + 1) == 0x9C) n = 2;                       // U+061C
    else if (c == 0xE2 && i + 2 < text.size()) {
      const unsigned char b = at(i + 1), d = at(i + 2);
      if ((b == 0x80 && (d == 0x8E || d == 0x8F || (d >= 0xAA && d <= 0xAE))) || (b == 0x81 && d >= 0xA6 && d <= 0xA9))
        n = 3;
    }
    if (n) {
      if (length) *length = n;
      return i;
    }
  }
  return std::string_view::npos;
}

namespace detail {
void ErrorThrower::operator=(const ErrorMessage& m) const {
  throw Error(m.str(), statement ? statement : "", file, line, device);
}
}  // namespace detail
}  // namespace furnace
