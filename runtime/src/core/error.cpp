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

namespace detail {
void ErrorThrower::operator=(const ErrorMessage& m) const {
  throw Error(m.str(), statement ? statement : "", file, line, device);
}
}  // namespace detail
}  // namespace furnace
