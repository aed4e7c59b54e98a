// libFuzzer target for byte sizes as people write them ("5MiB", "1.5GiB", "30MB": `furnace memory
// --alloc/--capacity/--context`), parse_size in runtime/src/memory/size_format.cpp. An accepted
// text gives the same number of bytes as an independent reading of the grammar; a rejected one
// gets one clear line. format_size, its output partner, must take any value.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "furnace/allocator.h"
#include "fuzz_common.h"

namespace {

using namespace furnace;
using fuzz::require;
using u128 = unsigned __int128;

// The grammar read a second way (strip spaces, split number and unit, exact rational arithmetic):
// [spaces] digits ["." digits] [spaces] [unit] [spaces], units B KiB MiB GiB TiB KB MB GB TB in any
// case, a whole number of bytes below 2^64.
std::optional<uint64_t> reference(std::string t) {
  auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!t.empty() && space(t.front())) t.erase(0, 1);
  while (!t.empty() && space(t.back())) t.pop_back();
  size_t i = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
  if (i == 0) return std::nullopt;
  std::string whole = t.substr(0, i), frac;
  if (i < t.size() && t[i] == '.') {
    size_t j = i + 1;
    while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) ++j;
    frac = t.substr(i + 1, j - i - 1);
    if (frac.empty() || frac.size() > 18) return std::nullopt;
    i = j;
  }
  while (i < t.size() && space(t[i])) ++i;
  std::string unit = t.substr(i);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::pair<const char*, uint64_t> units[] = {
      {"", 1}, {"b", 1}, {"kib", 1ull << 10}, {"mib", 1ull << 20}, {"gib", 1ull << 30}, {"tib", 1ull << 40},
      {"kb", 1000}, {"mb", 1000000}, {"gb", 1000000000}, {"tb", 1000000000000}};
  std::optional<uint64_t> mult;
  for (const auto& [name, bytes] : units)
    if (unit == name) mult = bytes;
  if (!mult) return std::nullopt;
  u128 w = 0;
  for (char c : whole) {
    w = w * 10 + static_cast<unsigned>(c - '0');
    if (w > UINT64_MAX) return std::nullopt;
  }
  u128 f = 0, scale = 1;
  for (char c : frac) f = f * 10 + static_cast<unsigned>(c - '0'), scale *= 10;
  if ((f * *mult) % scale != 0) return std::nullopt;
  const u128 total = w * *mult + f * *mult / scale;
  if (total > UINT64_MAX) return std::nullopt;
  return static_cast<uint64_t>(total);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  uint64_t bytes = 0;
  const bool ok = fuzz::accepts([&] { bytes = parse_size(text); });
  const std::optional<uint64_t> expected = reference(text);
  require(ok == expected.has_value(), "accepted exactly when the grammar says so");
  if (ok) require(bytes == *expected, "the same number of bytes as the grammar");
  if (size >= 8) {  // any 64-bit value prints
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v = v << 8 | data[k];
    const std::string s = format_size(v);
    require(!s.empty() && s.size() < 32, "format_size gives a short text");
  }
  return 0;
}
