// libFuzzer target for integer lists (`--hidden 512,512`, `--device-ids 0,1,2,3`, the visualizer's
// Controls): parse_int_list in runtime/src/train/scenario.cpp. Byte 0 bit 0 chooses allow_empty;
// the rest is the text. An accepted text has one integer per comma-separated item and prints back
// to itself (modulo leading zeros and "-0"); a rejected one gets one clear line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "furnace/train.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace furnace;
  using fuzz::require;
  if (size == 0) return 0;
  const bool allow_empty = data[0] & 1;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<int> v;
  if (!fuzz::accepts([&] { v = parse_int_list(text, "--fuzz", "integers (e.g. 1,2)", allow_empty); })) return 0;
  if (text.empty()) {
    require(allow_empty && v.empty(), "an empty text only when allowed, as an empty list");
    return 0;
  }
  size_t commas = 0;
  for (char c : text) commas += c == ',';
  require(v.size() == commas + 1, "one integer per item");
  std::string back;
  for (size_t i = 0; i < v.size(); ++i) back += (i ? "," : "") + std::to_string(v[i]);
  std::vector<int> again = parse_int_list(back, "--fuzz", "integers", false);
  require(again == v, "prints back to the same list");
  for (char c : text) require(c == ',' || c == '-' || (c >= '0' && c <= '9'), "only digits, '-' and ','");
  return 0;
}
