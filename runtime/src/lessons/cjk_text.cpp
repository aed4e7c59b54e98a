// cjk_text.cpp: the line-break tokeniser of furnace/cjk_text.h (the rules where lesson text may
// break, shared by the terminal renderer and the visualizer) and display_width.
#include "furnace/cjk_text.h"  // defines: break_tokens, next_code_point, is_wide, is_*_punctuation

namespace furnace::lesson {

int display_width(std::string_view utf8) {
  int w = 0;
  size_t i = 0;
  while (i < utf8.size()) {
    const char32_t c = next_code_point(utf8, i);
    w += is_wide(c) ? 2 : (c < 0x20 ? 0 : 1);
  }
  return w;
}

std::vector<BreakToken> break_tokens(std::string_view text, BreakOptions options) {
  std::vector<BreakToken> out;
  BreakToken cur;
  bool opened = false;                   // cur ends with opening punctuation: the next character joins it
  bool line_start = options.indentation;  // spaces here are indentation, kept with the first token
  auto push = [&] {
    cur.opens = opened;
    if (!cur.text.empty()) out.push_back(std::move(cur));
    cur = BreakToken{};
    opened = false;
  };
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    const char32_t c = next_code_point(text, i);
    const std::string_view ch = text.substr(start, i - start);
    if (c == ' ' || c == '\t') {
      if (line_start) {
        cur.text += ch;
        continue;
      }
      push();
      if (out.empty()) out.push_back(BreakToken{});  // spaces before the first token
      out.back().gap += ch;
      continue;
    }
    if (c == '\n') {
      push();
      if (out.empty() || out.back().hard) out.push_back(BreakToken{});  // nothing before it: an empty line
      out.back().gap.clear();  // spaces before the break are dropped
      out.back().hard = true;
      line_start = options.indentation;
      continue;
    }
    line_start = false;
    // A short bracketed list stays whole: "[0, 1]" is never split after its comma.
    if (options.short_brackets && c == '[') {
      const size_t close = text.find_first_of("]\n", i);
      if (close != std::string_view::npos && text[close] == ']' && close + 1 - start <= 24) {
        cur.text += text.substr(start, close + 1 - start);
        i = close + 1;
        opened = false;
        continue;
      }
    }
    if (is_closing_punctuation(c) && cur.text.empty()) {  // never at the start of a line
      if (!out.empty() && out.back().gap.empty() && !out.back().hard) {
        out.back().text += ch;  // it joins the token before it
        continue;
      }
      cur.text += ch;
      cur.joins_before = out.empty();
      push();
      continue;
    }
    if (!is_wide(c) && !is_opening_punctuation(c)) {  // a letter (or U+00A0, or ” inside a word) joins the word
      cur.text += ch;
      opened = false;
      continue;
    }
    if (is_closing_punctuation(c)) {  // ，。） after a word: stays with it, a break may follow
      cur.text += ch;
      push();
      continue;
    }
    if (!opened) push();
    cur.text += ch;
    opened = is_opening_punctuation(c);
    if (!opened) push();  // one CJK character is one token
  }
  push();
  return out;
}

}  // namespace furnace::lesson
