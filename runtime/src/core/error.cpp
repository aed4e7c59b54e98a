// Error construction and the thrower behind FURNACE_CHECK.
#include "furnace/error.h"

namespace furnace {

Error::Error(std::string message, std::string statement, const char* file, int line, int device)
    : std::runtime_error(message),
      message_(std::move(message)),
      statement_(std::move(statement)),
      file_(file ? file : ""),
      line_(line),
      device_(device) {}

namespace detail {
void ErrorThrower::operator=(const ErrorMessage& m) const {
  throw Error(m.str(), statement ? statement : "", file, line, device);
}
}  // namespace detail
}  // namespace furnace
