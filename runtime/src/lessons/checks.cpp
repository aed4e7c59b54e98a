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

// An expectation's operator as the evidence line says it: the key's name in English ("at_least"),
// words in Chinese.
const char* expectation_word(Expectation::Op op, Lang lang) {
  if (lang == Lang::en) return expectation_name(op);
  switch (op) {
    case Expectation::Op::equals: return "等于";
    case Expectation::Op::not_equals: return "不等于";
    case Expectation::Op::less_than: return "小于";
    case Expectation::Op::greater_than: return "大于";
    case Expectation::Op::at_most: return "至多";
    case Expectation::Op::at_least: return "至少";
    case Expectation::Op::approx: return "约等于";
    case Expectation::Op::contains: return "包含";
    case Expectation::Op::not_contains: return "不包含";
  }
  return "?";
}

// "at_least mem[1] x 2 (= 2000)": the operator, the value or reference, and what a reference was.
std::string describe(const CheckResult::Compared& c, Lang lang) {
  const Expectation& e = c.expectation;
  std::string what = e.of ? *e.of + (e.times != 1 ? " x " + format_value(Value::of_number(e.times)) : "")
                          : format_value(e.literal);
  if (c.resolved) what += " (= " + format_value(*c.resolved) + ")";
  using Why = CheckResult::Compared::Why;
  switch (c.why) {
    case Why::none: break;
    case Why::empty_array: what += lang == Lang::zh ? " [数组为空]" : " [the array is empty]"; break;
    case Why::not_a_number: what += lang == Lang::zh ? " [不是数字]" : " [not a number]"; break;
    case Why::expected_not_a_number:
      what += lang == Lang::zh ? " [预期值不是数字]" : " [the expected value is not a number]";
      break;
  }
  return std::string(expectation_word(e.op, lang)) + " " + what;
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
bool compare(const Value& a, double b, Expectation::Op op, CheckResult::Compared::Why* why) {
  if (a.type == Value::Type::array) {
    if (a.items.empty()) {
      *why = CheckResult::Compared::Why::empty_array;
      return false;
    }
    for (const Value& item : a.items)
      if (!compare(item, b, op, why)) return false;
    return true;
  }
  if (a.type != Value::Type::number) {
    *why = CheckResult::Compared::Why::not_a_number;
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

std::string describe_missing(const Missing& m, Lang lang) {
  const bool zh = lang == Lang::zh;
  switch (m.kind) {
    case Missing::Kind::step_not_run:
      return zh ? "步骤 '" + m.name + "' 还没有运行" : "step '" + m.name + "' has not run";
    case Missing::Kind::action_failed:
      return zh ? "没有产生：操作失败：" + m.detail : "not produced: the action failed: " + m.detail;
    case Missing::Kind::not_produced:
      return zh ? "没有产生 '" + m.name + "'" : "'" + m.name + "' was not produced";
    case Missing::Kind::not_an_element:
      return zh ? "'" + m.name + "' 不是数组的元素" : "'" + m.name + "' is not an element of an array";
    case Missing::Kind::out_of_range: {
      const std::string base = m.name.substr(0, m.name.find('['));
      return zh ? "'" + m.name + "' 超出范围：" + base + " 只有 " + std::to_string(m.count) + " 个元素 " + m.detail
                : "'" + m.name + "' is out of range: " + base + " has " + std::to_string(m.count) + " element" +
                      (m.count == 1 ? "" : "s") + " " + m.detail;
    }
    case Missing::Kind::times_not_number:
      return zh ? m.name + " 不是数字（times 需要数字）" : m.name + " is not a number (times needs one)";
  }
  return "?";
}

std::optional<Value> lookup(const std::string& ref, const Observables& own,
                            const std::map<std::string, Observables>& earlier, Missing* why) {
  const Observables* where = &own;
  std::string name = ref;
  if (const size_t dot = ref.find('.'); dot != std::string::npos) {
    const auto it = earlier.find(ref.substr(0, dot));
    if (it == earlier.end()) {
      *why = {Missing::Kind::step_not_run, ref.substr(0, dot), "", 0};
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
      *why = {Missing::Kind::action_failed, base, err->second.string, 0};
    else
      *why = {Missing::Kind::not_produced, base, "", 0};
    return std::nullopt;
  }
  if (index == -1) return it->second;
  if (index < 0 || it->second.type != Value::Type::array) {
    *why = {Missing::Kind::not_an_element, name, "", 0};
    return std::nullopt;
  }
  if (static_cast<size_t>(index) >= it->second.items.size()) {
    *why = {Missing::Kind::out_of_range, name, format_value(it->second), it->second.items.size()};
    return std::nullopt;
  }
  return it->second.items[static_cast<size_t>(index)];
}

std::string CheckResult::detail(Lang lang) const {
  if (missing) return (missing_of.empty() ? "" : missing_of + ": ") + describe_missing(*missing, lang);
  std::string details;
  for (const Compared& c : compared) details += (details.empty() ? "" : ", ") + describe(c, lang);
  return (lang == Lang::zh ? "应当" : "expected ") + details;
}

CheckResult evaluate_check(const Check& check, const Observables& own,
                           const std::map<std::string, Observables>& earlier) {
  CheckResult r;
  r.check = &check;
  Missing why;
  const std::optional<Value> actual = lookup(check.observable, own, earlier, &why);
  if (!actual) {
    r.missing = why;
    return r;
  }
  r.actual = actual->type == Value::Type::string && actual->string.empty() ? "\"\"" : format_value(*actual);
  r.pass = true;
  for (const Expectation& e : check.expectations) {
    CheckResult::Compared c;
    c.expectation = e;
    Value expected = e.literal;
    if (e.of) {
      const std::optional<Value> other = lookup(*e.of, own, earlier, &why);
      if (!other || (other->type != Value::Type::number && e.times != 1)) {
        r.pass = false;
        r.compared.clear();
        if (other) {
          r.missing = Missing{Missing::Kind::times_not_number, *e.of, "", 0};
        } else {
          r.missing = why;
          r.missing_of = *e.of;
        }
        return r;
      }
      expected = *other;
      if (expected.type == Value::Type::number) {
        expected.number *= e.times;
        if (e.times != std::floor(e.times)) expected.integer = false;
      }
      c.resolved = expected;
    }
    bool ok = false;
    switch (e.op) {
      case Expectation::Op::equals: ok = values_equal(*actual, expected); break;
      case Expectation::Op::not_equals: ok = !values_equal(*actual, expected); break;
      case Expectation::Op::approx: ok = approx_equal(*actual, expected, check.rel_tol, check.abs_tol); break;
      case Expectation::Op::contains: ok = contains(*actual, expected); break;
      case Expectation::Op::not_contains: ok = !contains(*actual, expected); break;
      default:
        if (expected.type != Value::Type::number)
          c.why = CheckResult::Compared::Why::expected_not_a_number;
        else
          ok = compare(*actual, expected.number, e.op, &c.why);
        break;
    }
    r.compared.push_back(std::move(c));
    r.pass = r.pass && ok;
  }
  return r;
}

PredictionResult prediction_answer(const Prediction& p, const Observables& own) {
  PredictionResult r;
  Missing why;
  const std::optional<Value> v = lookup(p.observable, own, {}, &why);
  if (!v) {
    r.missing = why;
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
