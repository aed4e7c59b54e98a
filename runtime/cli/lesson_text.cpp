// lesson_text.cpp: lesson text (lesson::Document) rendered for a terminal by `furnace lesson`:
// each block's text cut into pieces by furnace/cjk_text.h's break_tokens (ICU's line breaks, the
// ones the visualizer wraps by too), styled, and wrapped to the terminal's width in display
// columns (furnace/unicode_text.h). Not here: parsing the Markdown (the lessons
// engine's markdown.cpp).
#include "lesson_text.h"  // defines: render_terminal

#include <algorithm>
#include <string>
#include <vector>

#include "furnace/cjk_text.h"      // defines: break_tokens, BreakOptions
#include "furnace/line_breaks.h"   // defines: nearest_cut
#include "furnace/unicode_text.h"  // defines: display_width, next_code_point

namespace furnace::lesson {
namespace {

constexpr const char* kBold = "\x1b[1m";
constexpr const char* kCyan = "\x1b[36m";
constexpr const char* kReset = "\x1b[0m";

// A span's text as shown, and where it lies in the block's text.
struct Shown {
  size_t begin = 0, end = 0;
  const char* on = "";  // its colour's escape code, "" for none
};

// A unit of break_tokens (furnace/cjk_text.h): a Latin word or one CJK character with the
// punctuation that sticks to it, as a range of the block's text.
struct Piece {
  size_t begin = 0, end = 0;
  bool space_after = false;
  bool newline_after = false;  // a hard break
};

// A block's text as shown (its spans one after another) cut into pieces.
struct Pieces {
  std::string all;
  std::vector<Shown> shown;
  std::vector<Piece> pieces;

  // [begin, end) of the text, each span's part in its colour and reset after it, so a wrapped
  // line never leaks a colour.
  std::string styled(size_t begin, size_t end) const {
    std::string out;
    for (const Shown& s : shown) {
      const size_t b = std::max(begin, s.begin), e = std::min(end, s.end);
      if (b >= e) continue;
      out += *s.on ? s.on + all.substr(b, e - b) + kReset : all.substr(b, e - b);
    }
    return out;
  }
  int width(size_t begin, size_t end) const { return display_width(std::string_view(all).substr(begin, end - begin)); }
};

// The spans' pieces. The line-break rules read the block's text whole, so they see across span
// edges: "（" + "**DataParallel**" + "）" and "**parallel**," never break at the edges. `width`:
// the line width; a code span narrower than it is kept whole (`device_ids=[1, 0]` is never split
// at its space), a wider one breaks like text.
Pieces pieces_of(const std::vector<Span>& spans, bool color, int width) {
  Pieces out;
  BreakOptions options;
  for (const Span& span : spans) {
    std::string text = span.text;
    if (span.style & Span::link && !span.href.empty() && span.href != text) text += " (" + span.href + ")";
    if (!color && (span.style & Span::code)) text = "`" + text + "`";
    const char* on = !color ? "" : (span.style & Span::code) ? kCyan : (span.style & Span::strong) ? kBold : "";
    out.shown.push_back({out.all.size(), out.all.size() + text.size(), on});
    if ((span.style & Span::code) && text.find('\n') == std::string::npos && display_width(text) < width)
      options.keep_whole.push_back({out.shown.back().begin, out.shown.back().end});
    out.all += text;
  }
  for (const BreakToken& t : break_tokens(out.all, options)) {
    if (t.text.empty()) {  // spaces before the first unit, or a break: they belong to the piece before, if any
      if (out.pieces.empty()) continue;
      out.pieces.back().space_after = out.pieces.back().space_after || !t.gap.empty();
      out.pieces.back().newline_after = out.pieces.back().newline_after || t.hard;
      continue;
    }
    out.pieces.push_back({t.at, t.at + t.text.size(), !t.gap.empty(), t.hard});
  }
  return out;
}

// The end of the part of text [begin, end) that fits in `columns` (one character at least), moved
// back so that no line starts with ，。） or ends with （ where that is possible.
size_t cut_to_fit(const std::string& text, size_t begin, size_t end, int columns) {
  const std::string_view unit = std::string_view(text).substr(begin, end - begin);
  size_t fit = 0;
  for (size_t i = 0; i < unit.size();) {
    size_t j = i;
    next_code_point(unit, j);
    if (fit > 0 && display_width(unit.substr(0, j)) > columns) break;
    fit = i = j;
  }
  return begin + nearest_cut(unit, fit);
}

// Wraps pieces to `width`, every line starting with `first` (the first line) or `rest`. A piece
// wider than a whole line is cut where it overflows.
std::string wrap(const Pieces& text, int width, const std::string& first, const std::string& rest) {
  std::string out, line = first;
  int col = display_width(first);
  const int indent = display_width(rest);
  bool line_empty = true;
  bool pending_space = false;
  auto end_line = [&] {
    out += line + "\n";
    line = rest;
    col = indent;
    line_empty = true;
    pending_space = false;
  };
  for (const Piece& p : text.pieces) {
    const int need = text.width(p.begin, p.end) + (pending_space && !line_empty ? 1 : 0);
    if (!line_empty && col + need > width) end_line();
    if (pending_space && !line_empty) {
      line += ' ';
      ++col;
    }
    size_t begin = p.begin;
    while (line_empty && col + text.width(begin, p.end) > width) {  // wider than a whole line
      const size_t cut = cut_to_fit(text.all, begin, p.end, width - col);
      if (cut >= p.end) break;
      line += text.styled(begin, cut);
      end_line();
      begin = cut;
    }
    line += text.styled(begin, p.end);
    col += text.width(begin, p.end);
    line_empty = false;
    pending_space = p.space_after;
    if (p.newline_after) end_line();
  }
  if (!line_empty) out += line + "\n";
  return out;
}

}  // namespace

std::string render_terminal(const Document& doc, int width, bool color) {
  std::string out;
  for (size_t i = 0; i < doc.blocks.size(); ++i) {
    const Block& b = doc.blocks[i];
    std::string quote;
    for (int q = 0; q < b.quote_depth; ++q) quote += "| ";
    // A blank line between blocks, except between items of one list.
    const bool tight = i > 0 && b.kind == Block::Kind::list_item &&
                       doc.blocks[i - 1].kind == Block::Kind::list_item;
    // The blank line carries the quote bar only between two blocks of the same quote.
    const bool same_quote = i > 0 && b.quote_depth > 0 && doc.blocks[i - 1].quote_depth == b.quote_depth;
    if (i > 0 && !tight) out += same_quote ? quote + "\n" : "\n";
    switch (b.kind) {
      case Block::Kind::heading: {
        std::vector<Span> spans = b.spans;
        for (Span& s : spans) s.style |= Span::strong;
        const std::string prefix = b.level <= 2 ? "" : std::string(static_cast<size_t>(b.level - 2), '#') + " ";
        out += wrap(pieces_of(spans, color, width), width, quote + prefix, quote);
        if (b.level <= 2 && !color) {
          const int w = std::min(width, display_width(spans_text(b.spans)));
          out += quote + std::string(static_cast<size_t>(std::max(w, 1)), b.level == 1 ? '=' : '-') + "\n";
        }
        break;
      }
      case Block::Kind::paragraph: {
        const std::string pad(static_cast<size_t>(2 * b.level), ' ');
        out += wrap(pieces_of(b.spans, color, width), width, quote + pad, quote + pad);
        break;
      }
      case Block::Kind::list_item: {
        const std::string pad(static_cast<size_t>(2 * (b.level - 1)), ' ');
        const std::string mark = b.number > 0 ? std::to_string(b.number) + ". " : "- ";
        out += wrap(pieces_of(b.spans, color, width), width, quote + pad + mark,
                    quote + pad + std::string(mark.size(), ' '));
        break;
      }
      case Block::Kind::code: {
        const std::string pad = quote + std::string(static_cast<size_t>(2 * b.level + 4), ' ');
        size_t start = 0;
        while (start < b.code.size()) {
          size_t end = b.code.find('\n', start);
          if (end == std::string::npos) end = b.code.size();
          const std::string l = b.code.substr(start, end - start);
          out += pad + (color ? kCyan + l + kReset : l) + "\n";
          start = end + 1;
        }
        break;
      }
      case Block::Kind::rule:
        out += quote + std::string(static_cast<size_t>(std::min(width, 40)), '-') + "\n";
        break;
    }
  }
  return out;
}

}  // namespace furnace::lesson
