// furnace/cjk_text.h: where lesson text may break into lines, in one place: UTF-8 decoding, which
// characters are double width, which punctuation may not start or end a line, and the tokeniser
// that cuts text into the units a line never breaks inside. The terminal renderer (`furnace
// lesson`, runtime/cli/lesson_text.cpp) and the visualizer's wrap (visualizer/ui/wrap_text.cpp)
// both wrap with break_tokens; Markdown's soft breaks (markdown.cpp) use the character classes.
// Not a Unicode line-breaking algorithm: just what Chinese and English lesson text needs.
#pragma once

#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace furnace::lesson {

// ---- character classes --------------------------------------------------------------------------

// Decodes one code point at s[i], advancing i. An invalid byte (a lead byte without its
// continuation bytes, a stray continuation byte) is one character of its own, so a broken
// sequence never swallows the '\n' or the letters after it.
inline char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
  if (i + static_cast<size_t>(n) > s.size()) n = 1;
  for (int k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0xC0) != 0x80) n = 1;
  char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += static_cast<size_t>(n);
  return c;
}

// CJK ideographs, kana, hangul and fullwidth forms: two terminal columns, a line may break on
// either side of each.
inline bool is_wide(char32_t c) {
  return (c >= 0x1100 && c <= 0x115F) || (c >= 0x2E80 && c <= 0x303E) || (c >= 0x3041 && c <= 0x33FF) ||
         (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xA000 && c <= 0xA4CF) ||
         (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFE30 && c <= 0xFE4F) ||
         (c >= 0xFF00 && c <= 0xFF60) || (c >= 0xFFE0 && c <= 0xFFE6) || (c >= 0x20000 && c <= 0x3FFFD);
}

// Full-width punctuation (，。：（）「」): no space is needed on either side of it.
inline bool is_cjk_punctuation(char32_t c) {
  return (c >= 0x3000 && c <= 0x303F) || (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) ||
         (c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFF65);
}

// Punctuation shared by Chinese and English text (“ ” ‘ ’ — … ·): it belongs to whichever script
// is next to it, so a soft break beside it joins only when the other side is a CJK character.
inline bool is_shared_punctuation(char32_t c) {
  return (c >= 0x2018 && c <= 0x201D) || c == 0x2014 || c == 0x2026 || c == 0x00B7;
}

// Punctuation that must not start a line (it stays with the character before it).
inline bool is_closing_punctuation(char32_t c) {
  static constexpr char32_t kClosing[] = {U'，', U'。', U'、', U'；', U'：', U'？', U'！', U'）',
                                          U'」', U'』', U'》', U'〉', U'”', U'’', U'…', U'．', U'】'};
  return std::find(std::begin(kClosing), std::end(kClosing), c) != std::end(kClosing);
}

// Punctuation that must not end a line (it stays with the character after it).
inline bool is_opening_punctuation(char32_t c) {
  static constexpr char32_t kOpening[] = {U'（', U'「', U'『', U'《', U'〈', U'“', U'‘', U'【'};
  return std::find(std::begin(kOpening), std::end(kOpening), c) != std::end(kOpening);
}

// Display width of UTF-8 text in terminal columns (CJK and fullwidth characters count 2, control
// characters 0).
int display_width(std::string_view utf8);

// ---- line-break units ---------------------------------------------------------------------------

// A unit a line never breaks inside: a word (a narrow closing mark inside it, as in don’t,
// stays), one CJK character with the punctuation that sticks to it (never before ，。）” nor
// after （“), a short bracketed list, or a line's indentation with its first word. U+00A0 joins
// like a letter.
struct BreakToken {
  std::string text;    // empty: only carries `gap` or `hard` for what came before `text` began
  std::string gap;     // the spaces and tabs after it: a line may break there (and drops them)
  bool hard = false;   // a '\n' follows (two in a row: an empty token for the empty line)
  bool opens = false;  // ends with opening punctuation: whatever follows belongs with it
  bool joins_before = false;  // closing punctuation at the very start of the text: it belongs
                              // with the caller's text before (another span), if nothing separates them
};

struct BreakOptions {
  bool indentation = false;     // spaces at the start of a line stay with its first token (code)
  bool short_brackets = false;  // "[0, 1]" (24 bytes at most, on one line) is one token
};

// Cuts `text` into BreakTokens; a line may break between any two of them.
std::vector<BreakToken> break_tokens(std::string_view text, BreakOptions options = {});

}  // namespace furnace::lesson
