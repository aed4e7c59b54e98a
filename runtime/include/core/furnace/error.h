// furnace/error.h: the one exception type of the runtime and the check macros that throw it.
// Library code never exits: it throws furnace::Error; only the CLI's and visualizer's main() catch.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace furnace {

// An error with where it happened. `device` is -1 when no device is involved.
class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string statement = {}, const char* file = "", int line = 0,
        int device = -1);
  const std::string& message() const { return message_; }
  const std::string& statement() const { return statement_; }
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  int device() const { return device_; }

 private:
  std::string message_, statement_, file_;
  int line_;
  int device_;
};

// torch.cuda.OutOfMemoryError: the caching allocator could not satisfy a request.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// `text` with every byte outside printable ASCII written as \xNN: user input quoted in a message
// keeps the message on one line ("--hidden: '1\x0A2' is not ...").
std::string printable(std::string_view text);
// printable() of at most the first `max` bytes of `text`; a longer text ends in "... (N bytes)", so
// that a 100 kB environment variable quoted in a message stays a readable line.
std::string printable_clipped(std::string_view text, size_t max = 200);

// Where `text` holds something a terminal acts on instead of showing: a control character (C0,
// DEL, C1 in UTF-8) or a bidirectional-text control (U+061C, U+200E/F, U+202A..E, U+2066..9),
// which can make a line read differently from what it says. Returns the byte offset and sets
// `length` to the sequence's bytes, or returns npos. Text from files that Furnace prints as is
// (names in a topology) is checked with it.
size_t find_terminal_control(std::string_view text, size_t* length = nullptr);

namespace detail {
// Collects a streamed message: FURNACE_CHECK(x > 0) << "x was " << x;
class ErrorMessage {
 public:
  template <class T>
  ErrorMessage& operator<<(const T& v) {
    os_ << v;
    return *this;
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
};

// `operator=` binds looser than `<<`, so the whole message is built before the throw.
struct ErrorThrower {
  const char* file;
  int line;
  const char* statement;
  int device;
  [[noreturn]] void operator=(const ErrorMessage& m) const;
};
}  // namespace detail
}  // namespace furnace

// Throws furnace::Error with the streamed message when `cond` is false.
// (A while loop, which the [[noreturn]] throw leaves at once: a single statement with no else of
// its own, so an unbraced `if (...) FURNACE_CHECK(...) << ...;` is safe and GCC has no
// -Wdangling-else to report, as it did for an if/else even inside a switch.)
#define FURNACE_CHECK(cond)                                                     \
  while (!(cond))                                                               \
    ::furnace::detail::ErrorThrower{__FILE__, __LINE__, #cond, -1} =            \
        ::furnace::detail::ErrorMessage()

// Same, naming the device the failed statement concerns.
#define FURNACE_CHECK_DEVICE(cond, device)                                      \
  while (!(cond))                                                               \
    ::furnace::detail::ErrorThrower{__FILE__, __LINE__, #cond, (device)} =      \
        ::furnace::detail::ErrorMessage()

// Programmer errors (broken invariants), not user input.
#define FURNACE_ASSERT(cond) FURNACE_CHECK(cond) << "internal error: "

// Throws unconditionally with a streamed message.
#define FURNACE_FAIL() FURNACE_CHECK(false)
