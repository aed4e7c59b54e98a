// lessons/lesson_names.h (private): the shapes of the names a lesson folder uses (lessons/FORMAT.md):
// lesson and step ids, devices ("cpu", "cuda:N"), observable references and the "{#step-id}" of a
// step's heading. Hand-written instead of std::regex: libstdc++'s regex matcher recurses once per
// character, so a 20,000-character step id or heading overflowed the stack (found by
// fuzz_lesson_file; tests/fuzz/corpus/lesson_file/regression_*).
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

namespace furnace::lesson::names {

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
inline bool is_lower_or_digit(char c) { return (c >= 'a' && c <= 'z') || is_digit(c); }
inline bool is_slug_char(char c) { return is_lower_or_digit(c) || c == '-'; }

// [a-z0-9]+(-[a-z0-9]+)*: lower-case words joined by single '-'.
inline bool is_slug(std::string_view s) {
  if (s.empty() || s.front() == '-' || s.back() == '-' || s.find("--") != std::string_view::npos) return false;
  return std::all_of(s.begin(), s.end(), is_slug_char);
}

// A lesson id: two digits, '-', a slug ("01-single-card").
inline bool is_lesson_id(std::string_view s) {
  return s.size() >= 4 && is_digit(s[0]) && is_digit(s[1]) && s[2] == '-' && is_slug(s.substr(3));
}

// "cpu" or "cuda:N" with N of 1 to 3 digits.
inline bool is_place(std::string_view s) {
  if (s == "cpu") return true;
  return s.size() >= 6 && s.size() <= 8 && s.substr(0, 5) == "cuda:" && std::all_of(s.begin() + 5, s.end(), is_digit);
}

// An observable reference: [STEP.]NAME[[i]], STEP of [a-z0-9-], NAME of [a-z0-9_], i of 1 to 6 digits.
struct Ref {
  std::optional<std::string> step;
  std::string name;
  bool indexed = false;
};

inline std::optional<Ref> parse_ref(std::string_view s) {
  Ref r;
  if (const size_t dot = s.find('.'); dot != std::string_view::npos) {
    const std::string_view step = s.substr(0, dot);
    if (step.empty() || !std::all_of(step.begin(), step.end(), is_slug_char)) return std::nullopt;
    r.step = std::string(step);
    s.remove_prefix(dot + 1);
  }
  size_t n = 0;
  while (n < s.size() && (is_lower_or_digit(s[n]) || s[n] == '_')) ++n;
  if (n == 0) return std::nullopt;
  r.name = std::string(s.substr(0, n));
  s.remove_prefix(n);
  if (s.empty()) return r;
  if (s.size() < 3 || s.size() > 8 || s.front() != '[' || s.back() != ']' ||
      !std::all_of(s.begin() + 1, s.end() - 1, is_digit))
    return std::nullopt;
  r.indexed = true;
  return r;
}

// A step heading's text, "Title {#step-id}" (spaces around allowed): its title (which may be empty,
// and holds no line break) and its id (of [a-z0-9-]).
struct StepHeading {
  std::string title, id;
};

inline std::optional<StepHeading> parse_step_heading(std::string_view text) {
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  auto trim_end = [&](std::string_view v) {
    while (!v.empty() && is_space(v.back())) v.remove_suffix(1);
    return v;
  };
  text = trim_end(text);
  const size_t open = text.rfind("{#");  // the id holds no '{': its "{#" is the last one
  if (text.empty() || text.back() != '}' || open == std::string_view::npos) return std::nullopt;
  const std::string_view id = text.substr(open + 2, text.size() - open - 3);
  if (id.empty() || !std::all_of(id.begin(), id.end(), is_slug_char)) return std::nullopt;
  const std::string_view title = trim_end(text.substr(0, open));
  if (title.find_first_of("\r\n") != std::string_view::npos) return std::nullopt;
  return StepHeading{std::string(title), std::string(id)};
}

}  // namespace furnace::lesson::names
