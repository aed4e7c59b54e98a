// wrap_text: line breaking for lesson text drawn in a proportional font (the visualizer's Lesson
// panel), with the same rules as the terminal renderer: Chinese breaks between any two characters
// but never before ，。） nor after （“. Not here: measuring text (the caller's `measure`).
#include <string>
#include <vector>

#include "furnace/lesson.h"   // defines: wrap_text
#include "lessons/cjk_text.h"  // defines: next_code_point, is_wide, is_*_punctuation

namespace furnace::lesson {
namespace {

// A unit that is never broken: a word, one CJK character (with the punctuation that sticks to
// it), or the indentation at the start of a line. `gap`: the spaces after it; `hard`: a '\n'.
struct Token {
  std::string text;
  std::string gap;
  bool hard = false;
};

std::vector<Token> tokens_of(std::string_view text) {
  std::vector<Token> out;
  Token cur;
  bool opened = false;      // cur ends with opening punctuation: the next character joins it
  bool line_start = true;   // spaces here are indentation (code), kept with the first token
  auto push = [&] {
    if (!cur.text.empty()) out.push_back(std::move(cur));
    cur = Token{};
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
      } else {
        push();
        if (!out.empty()) out.back().gap += ch;
      }
      continue;
    }
    if (c == '\n') {
      push();
      if (out.empty() || out.back().hard) out.push_back(Token{});  // an empty line
      out.back().gap.clear();  // spaces before the break are dropped
      out.back().hard = true;
      line_start = true;
      continue;
    }
    line_start = false;
    // A short bracketed list stays whole: "[0, 1]" is never split after its comma.
    if (c == '[') {
      const size_t close = text.find_first_of("]\n", i);
      if (close != std::string_view::npos && text[close] == ']' && close + 1 - start <= 24) {
        cur.text += text.substr(start, close + 1 - start);
        i = close + 1;
        opened = false;
        continue;
      }
    }
    const bool glued_closing = is_closing_punctuation(c) && cur.text.empty() && !out.empty() &&
                               out.back().gap.empty() && !out.back().hard;
    if (glued_closing) {  // never at the start of a line: it joins the token before it
      out.back().text += ch;
      continue;
    }
    if (!is_wide(c) && !is_opening_punctuation(c)) {  // a letter (or U+00A0) joins the word
      cur.text += ch;
      opened = false;
      if (is_closing_punctuation(c)) push();  // ” ’ … end a word: a break may follow
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

}  // namespace

std::string wrap_text(std::string_view text, double width, const std::function<double(std::string_view)>& measure,
                      std::string_view hanging) {
  std::string out, line, gap;
  double line_width = 0;
  bool started = false;     // the line has a token (beyond a continuation's indentation)
  bool source_line = true;  // the next token starts a line of `text`
  std::string continuation;  // what a line broken here starts with
  double continuation_width = 0;
  auto end_line = [&](bool broken) {
    out += line;
    out += '\n';
    line.clear();
    gap.clear();
    line_width = 0;
    started = false;
    if (broken) {  // a continuation of the same line of text
      line = continuation;
      line_width = continuation_width;
    }
  };
  for (const Token& t : tokens_of(text)) {
    if (source_line && !hanging.empty()) {
      // The line's own indentation plus `hanging`, unless that leaves less than half the width.
      continuation = std::string(t.text.substr(0, t.text.find_first_not_of(" \t"))) + std::string(hanging);
      continuation_width = measure(continuation);
      if (continuation_width > width / 2) continuation.clear(), continuation_width = 0;
    }
    source_line = false;
    const double w = measure(t.text);
    const double gap_width = gap.empty() ? 0 : measure(gap);
    if (started && line_width + gap_width + w > width) end_line(true);
    if (!started && line_width + w > width && !t.text.empty()) {
      // Wider than what is left of the line: cut where it overflows (one character at least).
      std::string_view rest = t.text;
      while (!rest.empty()) {
        size_t fit = 0, i = 0;
        while (i < rest.size()) {
          size_t j = i;
          next_code_point(rest, j);
          if (fit > 0 && line_width + measure(rest.substr(0, j)) > width) break;
          fit = i = j;
        }
        line += rest.substr(0, fit);
        line_width += measure(rest.substr(0, fit));
        started = true;
        rest.remove_prefix(fit);
        if (!rest.empty()) end_line(true);
      }
    } else {
      if (started) line += gap;
      line += t.text;
      line_width += (started ? gap_width : 0) + w;
      started = true;
    }
    gap = t.gap;
    if (t.hard) {
      end_line(false);
      source_line = true;
    }
  }
  out += line;
  return out;
}

}  // namespace furnace::lesson
