// Byte sizes as people write them: PyTorch's format_size for output, parse_size for input.
// Not here: the allocator's rounding rules (caching_allocator.cpp).
#include <cctype>
#include <cstdio>
#include <string>

#include "furnace/size_format.h"
#include "furnace/error.h"      // defines: FURNACE_FAIL, printable

namespace furnace {

// Up to 1024 bytes: "N bytes"; up to 1 MiB: KiB; up to 1 GiB: MiB; above: GiB. Each bound is
// inclusive, so exactly 1 MiB prints as "1024.00 KiB". Always two decimals, never scientific.
std::string format_size(uint64_t bytes) {
  if (bytes <= 1024) return std::to_string(bytes) + " bytes";
  const char* unit = "GiB";
  double value = static_cast<double>(bytes) / 1073741824.0;
  if (bytes <= 1048576) {
    unit = "KiB";
    value = static_cast<double>(bytes) / 1024.0;
  } else if (bytes <= 1073741824) {
    unit = "MiB";
    value = static_cast<double>(bytes) / 1048576.0;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %s", value, unit);
  return buf;
}

namespace {

using u128 = unsigned __int128;

struct Unit {
  const char* name;  // compared case-insensitively
  uint64_t bytes;
};
constexpr Unit kUnits[] = {
    {"", 1},
    {"B", 1},
    {"KiB", uint64_t(1) << 10},
    {"MiB", uint64_t(1) << 20},
    {"GiB", uint64_t(1) << 30},
    {"TiB", uint64_t(1) << 40},
    {"KB", 1000},
    {"MB", 1000000},
    {"GB", 1000000000},
    {"TB", 1000000000000},
};

bool same_ignoring_case(const std::string& a, const char* b) {
  size_t i = 0;
  for (; i < a.size() && b[i] != '\0'; ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return i == a.size() && b[i] == '\0';
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

}  // namespace

// Grammar: [spaces] digits [ "." digits ] [spaces] [unit] [spaces]; the unit is one of B, KiB,
// MiB, GiB, TiB (binary), KB, MB, GB, TB (decimal), in any letter case; no unit means bytes.
// The result must be a whole number of bytes that fits in 64 bits.
uint64_t parse_size(const std::string& text) {
  auto fail = [&text](const char* why) {
    FURNACE_FAIL() << "invalid size '" << printable(text) << "': " << why;
  };
  size_t i = 0, end = text.size();
  while (i < end && is_space(text[i])) ++i;
  while (end > i && is_space(text[end - 1])) --end;
  if (i == end) fail("empty (expected a number with an optional unit, e.g. 512, 5MiB, 1.5GiB)");
  if (text[i] == '-') fail("a size cannot be negative");
  if (!is_digit(text[i])) fail("expected a number with an optional unit, e.g. 512, 5MiB, 1.5GiB");

  constexpr u128 kMax = UINT64_MAX;
  u128 whole = 0;
  for (; i < end && is_digit(text[i]); ++i) {
    whole = whole * 10 + static_cast<unsigned>(text[i] - '0');
    if (whole > kMax) fail("too large (the limit is 2^64 - 1 bytes)");
  }
  u128 frac = 0, frac_scale = 1;  // fraction = frac / frac_scale
  if (i < end && text[i] == '.') {
    ++i;
    if (i == end || !is_digit(text[i])) fail("expected digits after the decimal point");
    for (int digits = 0; i < end && is_digit(text[i]); ++i, ++digits) {
      if (digits == 18) fail("too many decimal places (at most 18)");
      frac = frac * 10 + static_cast<unsigned>(text[i] - '0');
      frac_scale *= 10;
    }
  }
  while (i < end && is_space(text[i])) ++i;
  const std::string unit_text = text.substr(i, end - i);
  const Unit* unit = nullptr;
  for (const Unit& u : kUnits)
    if (same_ignoring_case(unit_text, u.name)) unit = &u;
  if (unit == nullptr) {
    FURNACE_FAIL() << "invalid size '" << printable(text) << "': unknown unit '" << printable(unit_text)
                   << "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)";
  }
  // whole < 2^64 and unit <= 2^40, frac < 10^18 < 2^60: no product reaches 2^128.
  const u128 frac_bytes = frac * unit->bytes;
  if (frac_bytes % frac_scale != 0) fail("not a whole number of bytes");
  const u128 total = whole * unit->bytes + frac_bytes / frac_scale;
  if (total > kMax) fail("too large (the limit is 2^64 - 1 bytes)");
  return static_cast<uint64_t>(total);
}

}  // namespace furnace
