// lessons/toml_fields.h (private): reading one TOML table of a lesson file with every problem
// reported as one furnace::Error line "<file>:<line>:<column>: <what>: <problem>": the typed
// field readers and "did you mean" that lesson_file.cpp (lesson.toml) and step_setup.cpp (its
// [step.scenario] tables) share. Not here: what the fields mean.
#pragma once

#include <toml++/toml.h>  // defines: toml::table, toml::node, toml::array

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "furnace/error.h"        // defines: FURNACE_FAIL, printable
#include "furnace/lesson.h"       // defines: Text
#include "furnace/toml_reader.h"  // defines: toml_type_name, nearest_name

namespace furnace::lesson::detail {

// "did you mean 'x'?" or the list of allowed names.
inline std::string suggestion(std::string_view got, const std::vector<std::string>& allowed) {
  const std::string best = nearest_name(got, allowed);
  if (!best.empty()) return "did you mean '" + best + "'?";
  std::string all;
  for (const std::string& a : allowed) all += (all.empty() ? "" : ", ") + a;
  return "allowed: " + all;
}

// One TOML table being read; `what` names it in messages ("step 'mask'", "step 'mask': check 2").
class Fields {
 public:
  Fields(const toml::table& t, const std::string& origin, std::string what)
      : t_(t), origin_(origin), what_(std::move(what)) {}

  std::string at(const toml::node* n) const {
    std::ostringstream os;
    os << origin_;
    const toml::source_region& src = (n ? n->source() : t_.source());
    if (src.begin.line > 0) os << ':' << src.begin.line << ':' << src.begin.column;
    os << ": ";
    if (!what_.empty()) os << what_ << ": ";
    return os.str();
  }
  [[noreturn]] void fail(const toml::node* n, const std::string& message) const {
    FURNACE_FAIL() << at(n) << message;
    std::abort();
  }
  const toml::table& table() const { return t_; }
  const std::string& what() const { return what_; }
  const std::string& origin() const { return origin_; }
  int line() const { return static_cast<int>(t_.source().begin.line); }

  void only(const std::vector<std::string>& allowed, const char* in) const {
    for (auto&& [key, node] : t_) {
      const std::string k(key.str());
      if (std::find(allowed.begin(), allowed.end(), k) != allowed.end()) continue;
      fail(&node, "unknown key '" + printable(k) + "' in " + in + " (" + suggestion(k, allowed) + ")");
    }
  }
  const toml::node* find(std::string_view key) const { return t_.get(key); }
  const toml::node& need(std::string_view key) const {
    const toml::node* n = find(key);
    if (!n) fail(nullptr, "missing '" + std::string(key) + "'");
    return *n;
  }
  std::string string(std::string_view key) const { return string_of(need(key), key); }
  std::string string_of(const toml::node& n, std::string_view key) const {
    if (!n.is_string()) fail(&n, "'" + std::string(key) + "' must be a string, got " + toml_type_name(n));
    return std::string(*n.value<std::string_view>());
  }
  int64_t integer_of(const toml::node& n, std::string_view key) const {
    if (!n.is_integer()) fail(&n, "'" + std::string(key) + "' must be an integer, got " + toml_type_name(n));
    return *n.value<int64_t>();
  }
  int64_t integer(std::string_view key) const { return integer_of(need(key), key); }
  double number_of(const toml::node& n, std::string_view key) const {
    if (!n.is_number()) fail(&n, "'" + std::string(key) + "' must be a number, got " + toml_type_name(n));
    return *n.value<double>();
  }
  bool boolean_of(const toml::node& n, std::string_view key) const {
    if (!n.is_boolean()) fail(&n, "'" + std::string(key) + "' must be true or false, got " + toml_type_name(n));
    return *n.value<bool>();
  }
  const toml::array& array_of(const toml::node& n, std::string_view key) const {
    if (!n.is_array()) fail(&n, "'" + std::string(key) + "' must be an array, got " + toml_type_name(n));
    return *n.as_array();
  }
  std::vector<int64_t> integers_of(const toml::node& n, std::string_view key) const {
    std::vector<int64_t> out;
    for (const toml::node& item : array_of(n, key)) {
      if (!item.is_integer()) fail(&item, "'" + std::string(key) + "' must be an array of integers, got " + toml_type_name(item) + " in it");
      out.push_back(*item.value<int64_t>());
    }
    return out;
  }
  std::vector<std::string> strings_of(const toml::node& n, std::string_view key) const {
    std::vector<std::string> out;
    for (const toml::node& item : array_of(n, key)) {
      if (!item.is_string()) fail(&item, "'" + std::string(key) + "' must be an array of strings, got " + toml_type_name(item) + " in it");
      out.emplace_back(*item.value<std::string_view>());
    }
    return out;
  }
  // `key = { en = "...", zh = "..." }` (or the dotted form): both required, non-empty.
  Text text(std::string_view key) const {
    const toml::node& n = need(key);
    if (!n.is_table()) fail(&n, "'" + std::string(key) + "' must be a table { en = \"...\", zh = \"...\" }, got " + toml_type_name(n));
    Fields f(*n.as_table(), origin_, what_.empty() ? std::string(key) : what_ + ": " + std::string(key));
    f.only({"en", "zh"}, std::string("'" + std::string(key) + "'").c_str());
    Text t{f.string("en"), f.string("zh")};
    if (t.en.empty()) f.fail(f.find("en"), "the English text is empty");
    if (t.zh.empty()) f.fail(f.find("zh"), "the Chinese text is empty");
    return t;
  }

 private:
  const toml::table& t_;
  std::string origin_;
  std::string what_;
};

}  // namespace furnace::lesson::detail
