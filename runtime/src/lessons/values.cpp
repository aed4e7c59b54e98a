// values.cpp: the values observables hold, how they print and when two are equal.
#include <cmath>
#include <cstdio>
#include <string>

#include "furnace/lesson.h"  // defines: Value, format_value, values_equal

namespace furnace::lesson {

Value Value::of_int(int64_t v) {
  Value x;
  x.type = Type::number;
  x.number = static_cast<double>(v);
  x.integer = true;
  return x;
}

Value Value::of_number(double v) {
  Value x;
  x.type = Type::number;
  x.number = v;
  return x;
}

Value Value::of_bool(bool v) {
  Value x;
  x.type = Type::boolean;
  x.boolean = v;
  return x;
}

Value Value::of_string(std::string v) {
  Value x;
  x.type = Type::string;
  x.string = std::move(v);
  return x;
}

Value Value::of_array(std::vector<Value> v) {
  Value x;
  x.type = Type::array;
  x.items = std::move(v);
  return x;
}

Value Value::of_numbers(const std::vector<double>& v) {
  std::vector<Value> out;
  for (double d : v) out.push_back(of_number(d));
  return of_array(std::move(out));
}

Value Value::of_strings(const std::vector<std::string>& v) {
  std::vector<Value> out;
  for (const std::string& s : v) out.push_back(of_string(s));
  return of_array(std::move(out));
}

std::string format_value(const Value& v) {
  switch (v.type) {
    case Value::Type::number: {
      char buf[64];
      if (std::isnan(v.number)) return "nan";
      if (std::isinf(v.number)) return v.number > 0 ? "inf" : "-inf";
      // Whole numbers, and any of a million or more (a rate in samples/s), in plain digits: the
      // lesson text beside them writes 1,004,000, not 1.00378e+06.
      const bool plain = std::fabs(v.number) < 1e15 && (v.number == std::floor(v.number) || std::fabs(v.number) >= 1e6);
      if (v.integer || plain) {
        std::snprintf(buf, sizeof buf, "%.0f", v.number);
      } else {
        std::snprintf(buf, sizeof buf, "%.6g", v.number);
      }
      return buf;
    }
    case Value::Type::boolean: return v.boolean ? "true" : "false";
    case Value::Type::string: return v.string;
    case Value::Type::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.items.size(); ++i) {
        const bool quote = v.items[i].type == Value::Type::string;
        out += (i ? ", " : "") + (quote ? "\"" + v.items[i].string + "\"" : format_value(v.items[i]));
      }
      return out + "]";
    }
  }
  return "";
}

bool values_equal(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case Value::Type::number: return a.number == b.number;
    case Value::Type::boolean: return a.boolean == b.boolean;
    case Value::Type::string: return a.string == b.string;
    case Value::Type::array:
      if (a.items.size() != b.items.size()) return false;
      for (size_t i = 0; i < a.items.size(); ++i)
        if (!values_equal(a.items[i], b.items[i])) return false;
      return true;
  }
  return false;
}

}  // namespace furnace::lesson
