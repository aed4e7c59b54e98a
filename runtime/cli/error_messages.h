// cli/error_messages: the CLI's error lines in the reader's language. One catalogue of the
// common English lines (templates, "{}" for what varies) with their Chinese; `furnace lesson ...
// --lang zh` rethrows a furnace::Error through it and main() prints the result. Lines the
// catalogue does not know stay English, as do PyTorch's own errors inside a lesson (a learner
// searches for those words).
#pragma once

#include <string>

#include "furnace/lesson.h"  // defines: Lang

namespace furnace::cli {

// An error already put in the reader's language: main() prints `prefix` + `line`.
struct LocalizedError {
  std::string prefix;  // "furnace: error: " or "furnace：错误："
  std::string line;
};

// The catalogue's translation of `english` into `lang`; `english` itself for Lang::en or a line
// the catalogue does not know.
std::string translate_error(const std::string& english, lesson::Lang lang);
std::string error_prefix(lesson::Lang lang);

// Runs `f`; a furnace::Error it throws comes out as a LocalizedError in `lang`.
template <class F>
void in_language(lesson::Lang lang, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    throw LocalizedError{error_prefix(lang), translate_error(e.what(), lang)};
  }
}

}  // namespace furnace::cli
