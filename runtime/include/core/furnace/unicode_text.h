// furnace/unicode_text.h: what the characters of a UTF-8 string are and how many terminal columns
// each takes, by ICU (Unicode's East Asian Width property: a Chinese character or full-width
// punctuation is two columns, a combining mark or control character none). Every table the CLI
// prints, the lesson renderer and the wrapping tests measure with display_width. Not here: where a
// line may break (furnace/line_breaks.h).
#pragma once

#include <cstddef>
#include <string_view>

namespace furnace {

// Decodes the code point at s[i] and moves i past it. An ill-formed sequence (a stray
// continuation byte, a lead byte cut short, an overlong form, a surrogate) is U+FFFD and only as
// many bytes as form its maximal ill-formed part, so it never swallows the '\n' or the letters
// after it. `i` must be < s.size().
char32_t next_code_point(std::string_view s, size_t& i);
// The code point that ends just before s[i], moving i back to its start (ill-formed: U+FFFD).
// `i` must be > 0.
char32_t previous_code_point(std::string_view s, size_t& i);

// Terminal columns of one code point: 2 for East Asian Wide and Fullwidth characters, 0 for
// control and format characters and combining marks, 1 for everything else (ambiguous-width
// characters such as “ ” … count 1, as in a non-CJK terminal locale).
int code_point_width(char32_t c);

// Wide or fullwidth (two columns): a Chinese character, kana, hangul, ，。（）.
inline bool is_wide(char32_t c) { return code_point_width(c) == 2; }

// Terminal columns of UTF-8 text: the sum of its code points' widths.
int display_width(std::string_view utf8);

}  // namespace furnace
