// checks.cpp: evaluating a step's checks against the observables its action produced (and those
// of earlier steps), and judging a learner's answer to a prediction. Not here: which observables
// exist (actions.cpp) or the load-time validation of references (loader.cpp).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "furnace/lesson.h"  // defines: Check, Expectation, lookup, evaluate_check, ...

namespace furnace::lesson {
namespace {

// "NAME[3]" -> ("NAME", 3); "NAME" -> ("NAME", -1). A malformed index gives -2.
std::pair<std::string, long> split_index(const std::string& ref) {
  const size_t open = ref.find('[');
  if (open == std::string::npos) return {ref, -1};
  if (ref.back() != ']' || open + 2 > ref.size() - 1) return {ref.substr(0, open), -2};
  const std::string digits = ref.substr(open + 1, ref.size() - open - 2);
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      digits.size() > 9)
    return {ref.substr(0, open), -2};
  return {ref.substr(0, open), std::stol(digits)};
}

std::string describe(const Expectation& e) {
  std::string what = e.of ? *e.of + (e.times != 1 ? " x " + format_value(Value::of_number(e.times)) : "")
                          : format_value(e.literal);
  return std::string(expectation_name(e.op)) + " " + what;
}

bool approx_equal(const Value& a, const Value& b, double rel, double abs) {
  if (a.type == Value::Type::array && b.type == Value::Type::array) {
    if (a.items.size() != b.items.size()) return false;
    for (size_t i = 0; i < a.items.size(); ++i)
      if (!approx_equal(a.items[i], b.items[i], rel, abs)) return false;
    return true;
  }
  if (a.type != Value::Type::number || b.type != Value::Type::number) return false;
  return std::fabs(a.number - b.number) <= rel * std::fabs(b.number) + abs;
}

// Numeric comparison of `a` (a number, or every element of an array) with the number `b`.
bool compare(const Value& a, double b, Expectation::Op op, std::string* why) {
  if (a.type == Value::Type::array) {
    if (a.items.empty()) {
      *why = "the array is empty";
      return false;
    }
    for (const Value& item : a.items)
      if (!compare(item, b, op, why)) return false;
    return true;
  }
  if (a.type != Value::Type::number) {
    *why = "not a number";
    return false;
  }
  switch (op) {
    case Expectation::Op::less_than: return a.number < b;
    case Expectation::Op::greater_than: return a.number > b;
    case Expectation::Op::at_most: return a.number <= b;
    case Expectation::Op::at_least: return a.number >= b;
    default: return false;
  }
}

bool contains(const Value& a, const Value& needle) {
  if (a.type == Value::Type::string && needle.type == Value::Type::string)
    return a.string.find(needle.string) != std::string::npos;
  if (a.type == Value::Type::array)
    return std::any_of(a.items.begin(), a.items.end(), [&](const Value& x) { return values_equal(x, needle); });
  return false;
}

// `text` as a number when the whole of it is one ("4.0"); nullopt otherwise.
std::optional<double> parse_number(const std::string& text) {
  try {
    size_t used = 0;
    const double d = std::stod(text, &used);
    if (used == text.size()) return d;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Lower-case, without spaces, brackets, quotes; "," separators kept ("3 3" -> "3,3").
std::string normalize_answer(std::string_view text) {
  std::string s(text);
  for (size_t at; (at = s.find("\xEF\xBC\x8C")) != std::string::npos;) s.replace(at, 3, ",");  // "，"
  std::string out;
  bool pending_sep = false;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == ',') {
      pending_sep = pending_sep || !out.empty();
      continue;
    }
    if (c == '[' || c == ']' || c == '(' || c == ')' || c == '"' || c == '\'' || c == '\n' || c == '\r') continue;
    if (pending_sep) out += ',';
    pending_sep = false;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

const char* expectation_name(Expectation::Op op) {
  switch (op) {
    case Expectation::Op::equals: return "equals";
    case Expectation::Op::not_equals: return "not_equals";
    case Expectation::Op::less_than: return "less_than";
    case Expectation::Op::greater_than: return "greater_than";
    case Expectation::Op::at_most: return "at_most";
    case Expectation::Op::at_least: return "at_least";
    case Expectation::Op::approx: return "approx";
    case Expectation::Op::contains: return "contains";
    case Expectation::Op::not_contains: return "not_contains";
  }
  return "?";
}

std::optional<Value> lookup(const std::string& ref, const Observables& own,
                            const std::map<std::string, Observables>& earlier, std::string* why) {
  const Observables* where = &own;
  std::string name = ref;
  if (const size_t dot = ref.find('.'); dot != std::string::npos) {
    const auto it = earlier.find(ref.substr(0, dot));
    if (it == earlier.end()) {
      *why = "step '" + ref.substr(0, dot) + "' has not run";
      return std::nullopt;
    }
    where = &it->second;
    name = ref.substr(dot + 1);
  }
  const auto [base, index] = split_index(name);
  const auto it = where->find(base);
  if (it == where->end()) {
    const auto err = where->find("error");
    if (err != where->end() && !err->second.string.empty())
      *why = "not produced: the action failed: " + err->second.string;
    else
      *why = "'" + base + "' was not produced";
    return std::nullopt;
  }
  if (index == -1) return it->second;
  if (index < 0 || it->second.type != Value::Type::array) {
    *why = "'" + name + "' is not an element of an array";
    return std::nullopt;
  }
  if (static_cast<size_t>(index) >= it->second.items.size()) {
    *why = "'" + name + "' is out of range: " + base + " has " + std::to_string(it->second.items.size()) +
           " element" + (it->second.items.size() == 1 ? "" : "s") + " " + format_value(it->second);
    return std::nullopt;
  }
  return it->second.items[static_cast<size_t>(index)];
}

CheckResult evaluate_check(const Check& check, const Observables& own,
                           const std::map<std::string, Observables>& earlier) {
  CheckResult r;
  r.check = &check;
  std::string why;
  const std::optional<Value> actual = lookup(check.observable, own, earlier, &why);
  if (!actual) {
    r.detail = why;
    return r;
  }
  r.actual = actual->type == Value::Type::string && actual->string.empty() ? "\"\"" : format_value(*actual);
  r.pass = true;
  std::string details;
  for (const Expectation& e : check.expectations) {
    Value expected = e.literal;
    if (e.of) {
      const std::optional<Value> other = lookup(*e.of, own, earlier, &why);
      if (!other) {
        r.pass = false;
        r.detail = *e.of + ": " + why;
        return r;
      }
      expected = *other;
      if (expected.type == Value::Type::number) {
        expected.number *= e.times;
        if (e.times != std::floor(e.times)) expected.integer = false;
      } else if (e.times != 1) {
        r.pass = false;
        r.detail = *e.of + " is not a number (times needs one)";
        return r;
      }
    }
    bool ok = false;
    std::string reason;
    switch (e.op) {
      case Expectation::Op::equals: ok = values_equal(*actual, expected); break;
      case Expectation::Op::not_equals: ok = !values_equal(*actual, expected); break;
      case Expectation::Op::approx: ok = approx_equal(*actual, expected, check.rel_tol, check.abs_tol); break;
      case Expectation::Op::contains: ok = contains(*actual, expected); break;
      case Expectation::Op::not_contains: ok = !contains(*actual, expected); break;
      default:
        if (expected.type != Value::Type::number) {
          reason = "the expected value is not a number";
        } else {
          ok = compare(*actual, expected.number, e.op, &reason);
        }
        break;
    }
    const std::string what = describe(e) + (e.of ? " (= " + format_value(expected) + ")" : "");
    details += (details.empty() ? "" : ", ") + what + (reason.empty() ? "" : " [" + reason + "]");
    r.pass = r.pass && ok;
  }
  r.detail = "expected " + details;
  return r;
}

PredictionResult prediction_answer(const Prediction& p, const Observables& own) {
  PredictionResult r;
  std::string why;
  const std::optional<Value> v = lookup(p.observable, own, {}, &why);
  if (!v) {
    r.answer = "(" + why + ")";
    r.among_choices = false;
    return r;
  }
  r.answer = format_value(*v);
  if (!p.choices.empty())
    r.among_choices = std::any_of(p.choices.begin(), p.choices.end(), [&](const std::string& c) {
      return answer_matches(Prediction{{}, p.observable, {}, 0}, *v, c);
    });
  return r;
}

bool answer_is_judged(const Prediction& p, const Value& real) {
  return !p.choices.empty() || real.type != Value::Type::string;
}

std::string choice_label(size_t index) { return std::string(1, static_cast<char>('a' + index)); }

std::optional<size_t> chosen(const Prediction& p, std::string_view answer) {
  const std::string trimmed = normalize_answer(answer);
  // A choice by its letter (the terminal lists them a), b), ...: letters, as most choices are
  // numbers, which a numbered list would make ambiguous: "1) 2  2) 4", is "2" the 2 or the 4?).
  if (trimmed.size() == 1 && trimmed[0] >= 'a' && static_cast<size_t>(trimmed[0] - 'a') < p.choices.size() &&
      p.choices.size() <= 26)
    return static_cast<size_t>(trimmed[0] - 'a');
  for (size_t i = 0; i < p.choices.size(); ++i)  // a choice typed as it is shown
    if (normalize_answer(p.choices[i]) == trimmed) return i;
  if (const std::optional<double> typed = parse_number(trimmed))  // "4.0" is the choice "4"
    for (size_t i = 0; i < p.choices.size(); ++i)
      if (parse_number(normalize_answer(p.choices[i])) == typed) return i;
  return std::nullopt;
}

bool answer_matches(const Prediction& p, const Value& real, std::string_view answer) {
  if (const std::optional<size_t> i = chosen(p, answer))
    return answer_matches(Prediction{{}, p.observable, {}, 0}, real, p.choices[*i]);
  const std::string trimmed = normalize_answer(answer);
  const std::string want = normalize_answer(format_value(real));
  if (trimmed == want) return true;
  if (real.type == Value::Type::number) return parse_number(trimmed) == real.number;
  if (real.type == Value::Type::array) {  // numbers inside arrays compared as numbers: "0.50,1"
    std::vector<std::string> parts;
    size_t start = 0;
    while (start <= trimmed.size()) {
      size_t comma = trimmed.find(',', start);
      if (comma == std::string::npos) comma = trimmed.size();
      parts.push_back(trimmed.substr(start, comma - start));
      start = comma + 1;
    }
    if (parts.size() != real.items.size()) return false;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Value& item = real.items[i];
      if (item.type != Value::Type::number) {
        if (parts[i] != normalize_answer(format_value(item))) return false;
        continue;
      }
      if (parse_number(parts[i]) != item.number) return false;
    }
    return true;
  }
  return false;
}

}  // namespace furnace::lesson
