// wrap_text.cpp: line breaking for lesson text drawn in a proportional font (the Lesson panel):
// the units of furnace/cjk_text.h's break_tokens (the same rules as the terminal renderer), laid
// into lines by the caller's measure. Not here: measuring or drawing text.
#include "wrap_text.h"  // defines: wrap_text

#include <string>

#include "furnace/cjk_text.h"      // defines: break_tokens
#include "furnace/line_breaks.h"   // defines: nearest_cut
#include "furnace/unicode_text.h"  // defines: next_code_point

namespace furnace::lesson {

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
  for (const BreakToken& t : break_tokens(text, {.indentation = true, .short_brackets = true})) {
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
        fit = nearest_cut(rest, fit);  // never before ，。） nor after （
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
