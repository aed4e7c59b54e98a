// lesson_text.cpp: lesson text (lesson::Document) rendered for a terminal by `furnace lesson`:
// spans cut into pieces by furnace/cjk_text.h's break_tokens (the rules the visualizer wraps by
// too), styled, and wrapped to the terminal's width. Not here: parsing the Markdown (the lessons
// engine's markdown.cpp).
#include "lesson_text.h"  // defines: render_terminal

#include <algorithm>
#include <string>
#include <vector>

#include "furnace/cjk_text.h"  // defines: break_tokens, display_width, next_code_point, is_wide, ...

namespace furnace::lesson {
namespace {

constexpr const char* kBold = "\x1b[1m";
constexpr const char* kCyan = "\x1b[36m";
constexpr const char* kReset = "\x1b[0m";

// Columns of a piece: CJK characters two, everything else one.
int columns(std::string_view text) {
  int w = 0;
  size_t i = 0;
  while (i < text.size()) w += is_wide(next_code_point(text, i)) ? 2 : 1;
  return w;
}

// A unit of break_tokens (furnace/cjk_text.h) with its width and colour: a Latin word or one CJK
// character with the punctuation that sticks to it.
struct Piece {
  std::string text;      // with escape codes when coloured
  int width = 0;
  bool space_after = false;
  bool newline_after = false;  // a hard break
  bool opens = false;          // ends with opening punctuation: the next piece joins it
};

// `width`: the line width; a code span narrower than it is one piece (`device_ids=[1, 0]` is
// never split at its space), a wider one breaks like text.
std::vector<Piece> pieces_of(const std::vector<Span>& spans, bool color, int width) {
  std::vector<Piece> out;
  for (const Span& span : spans) {
    std::string text = span.text;
    if (span.style & Span::link && !span.href.empty() && span.href != text) text += " (" + span.href + ")";
    if (!color && (span.style & Span::code)) text = "`" + text + "`";
    const bool whole = (span.style & Span::code) && text.find('\n') == std::string::npos &&
                       display_width(text) < width;
    std::vector<Piece> mine;
    auto previous = [&]() -> Piece* {
      return !mine.empty() ? &mine.back() : !out.empty() ? &out.back() : nullptr;
    };
    if (whole) {
      if (!text.empty()) mine.push_back({text, columns(text)});
    } else {
      for (BreakToken& t : break_tokens(text)) {
        Piece* p = previous();
        // Spaces or a break before the first unit, or closing punctuation at the start of the
        // span (never at the start of a line): they belong to the piece before, if any.
        if (t.text.empty() || (t.joins_before && p && !p->space_after && !p->newline_after)) {
          if (!p) continue;
          p->text += t.text;
          p->width += columns(t.text);
          p->space_after = p->space_after || !t.gap.empty();
          p->newline_after = p->newline_after || t.hard;
          continue;
        }
        const int w = columns(t.text);
        mine.push_back({std::move(t.text), w, !t.gap.empty(), t.hard, t.opens});
      }
    }
    const char* on = !color ? "" : (span.style & Span::code) ? kCyan : (span.style & Span::strong) ? kBold : "";
    // A span that continues a word of the previous one ("**parallel**," or "`x`s") must not be
    // separated from it by a line break: its first piece joins the previous piece.
    // The same when the previous piece ends with opening punctuation ("（" + "**DataParallel**").
    size_t first = 0;
    const char32_t c0 = text.empty() ? 0 : next_code_point(text, first);
    const bool glue = !mine.empty() && !out.empty() && !out.back().space_after && !out.back().newline_after &&
                      (out.back().opens || (c0 != 0 && c0 != ' ' && c0 != '\n' && !is_wide(c0) &&
                                            !is_opening_punctuation(c0)));
    for (size_t k = 0; k < mine.size(); ++k) {
      Piece& p = mine[k];
      // Each piece coloured on its own, so a wrapped line never leaks a colour.
      if (*on) p.text = std::string(on) + p.text + kReset;
      if (k == 0 && glue) {
        out.back().text += p.text;
        out.back().width += p.width;
        out.back().space_after = p.space_after;
        out.back().newline_after = p.newline_after;
        out.back().opens = p.opens;
        continue;
      }
      out.push_back(std::move(p));
    }
  }
  return out;
}

// Wraps pieces to `width`, every line starting with `first` (the first line) or `rest`.
std::string wrap(const std::vector<Piece>& pieces, int width, const std::string& first, const std::string& rest) {
  std::string out, line = first;
  int col = display_width(first);
  const int indent = display_width(rest);
  bool line_empty = true;
  bool pending_space = false;
  for (const Piece& p : pieces) {
    const int need = p.width + (pending_space && !line_empty ? 1 : 0);
    if (!line_empty && col + need > width) {
      out += line + "\n";
      line = rest;
      col = indent;
      line_empty = true;
      pending_space = false;
    }
    if (pending_space && !line_empty) {
      line += ' ';
      ++col;
    }
    line += p.text;
    col += p.width;
    line_empty = false;
    pending_space = p.space_after;
    if (p.newline_after) {
      out += line + "\n";
      line = rest;
      col = indent;
      line_empty = true;
      pending_space = false;
    }
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
