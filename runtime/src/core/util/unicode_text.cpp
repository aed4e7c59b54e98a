// unicode_text.cpp: furnace/unicode_text.h over ICU's validated UTF-8 decoding (U8_NEXT) and its
// character properties (East Asian Width, general category).
#include "furnace/unicode_text.h"

#include <unicode/uchar.h>  // defines: u_getIntPropertyValue, u_charType, UCHAR_EAST_ASIAN_WIDTH
#include <unicode/utf8.h>   // defines: U8_NEXT, U8_PREV

#include <algorithm>
#include <cstdint>

namespace furnace {

char32_t next_code_point(std::string_view s, size_t& i) {
  // At most four bytes form a character: decode inside that window, so offsets fit ICU's int32_t.
  const std::string_view window = s.substr(i, 4);
  int32_t at = 0;
  UChar32 c = 0;
  U8_NEXT(window.data(), at, static_cast<int32_t>(window.size()), c);
  i += static_cast<size_t>(std::max(at, 1));
  return c < 0 ? U'\uFFFD' : static_cast<char32_t>(c);
}

char32_t previous_code_point(std::string_view s, size_t& i) {
  const size_t from = i >= 4 ? i - 4 : 0;
  const std::string_view window = s.substr(from, i - from);
  int32_t at = static_cast<int32_t>(window.size());
  UChar32 c = 0;
  U8_PREV(window.data(), 0, at, c);
  i = from + static_cast<size_t>(at);
  return c < 0 ? U'\uFFFD' : static_cast<char32_t>(c);
}

int code_point_width(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  switch (u_charType(cp)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
      return 0;
    default:
      break;
  }
  const int eaw = u_getIntPropertyValue(cp, UCHAR_EAST_ASIAN_WIDTH);
  return eaw == U_EA_WIDE || eaw == U_EA_FULLWIDTH ? 2 : 1;
}

int display_width(std::string_view utf8) {
  int w = 0;
  for (size_t i = 0; i < utf8.size();) w += code_point_width(next_code_point(utf8, i));
  return w;
}

}  // namespace furnace
