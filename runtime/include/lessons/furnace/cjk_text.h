// furnace/cjk_text.h: lesson text cut into the units a line never breaks inside, at the break
// opportunities of furnace/line_breaks.h (Unicode's line-breaking algorithm, ICU): the terminal
// renderer (`furnace lesson`, runtime/cli/lesson_text.cpp) and the visualizer's wrap
// (visualizer/ui/wrap_text.cpp) both lay out lines from break_tokens. Also the punctuation classes
// Markdown's soft breaks (markdown.cpp) join by. Not here: decoding and widths
// (furnace/unicode_text.h), the line-breaking rules themselves (ICU's).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "furnace/unicode_text.h"  // defines: next_code_point, is_wide, display_width

namespace furnace::lesson {

// ---- character classes of Markdown's soft breaks ------------------------------------------------

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

// ---- line-break units ---------------------------------------------------------------------------

// A unit a line never breaks inside: the text between two break opportunities (a word, one
// Chinese character with the punctuation that sticks to it), without the spaces after it.
struct BreakToken {
  std::string text;  // empty: only carries `gap` or `hard` (spaces before the first unit, an empty line)
  std::string gap;   // the spaces and tabs after it: a line may break there (and drops them)
  bool hard = false;  // a '\n' follows (two in a row: an empty token for the empty line)
  size_t at = 0;      // where `text` starts in the text cut
};

struct BreakOptions {
  bool indentation = false;     // spaces at the start of a line stay with its first token (code)
  bool short_brackets = false;  // "[0, 1]" (24 bytes at most, on one line) is one token
  // Byte ranges [first, second) a line never breaks inside (a code span kept whole).
  std::vector<std::pair<size_t, size_t>> keep_whole{};
};

// Cuts `text` into BreakTokens; a line may break between any two of them.
std::vector<BreakToken> break_tokens(std::string_view text, const BreakOptions& options = {});

}  // namespace furnace::lesson
