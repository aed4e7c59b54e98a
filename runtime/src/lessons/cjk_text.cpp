// cjk_text.cpp: break_tokens of furnace/cjk_text.h: ICU's break opportunities
// (furnace/line_breaks.h), less those inside what the caller keeps whole, cut into tokens.
#include "furnace/cjk_text.h"  // defines: break_tokens

#include <algorithm>

#include "furnace/line_breaks.h"  // defines: line_breaks

namespace furnace::lesson {
namespace {

// The short bracketed lists of `text` ("[0, 1]": 24 bytes at most, no '\n'), as byte ranges.
std::vector<std::pair<size_t, size_t>> short_brackets(std::string_view text) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t open = text.find('['); open != std::string_view::npos; open = text.find('[', open + 1)) {
    const size_t close = text.find_first_of("]\n", open + 1);
    if (close != std::string_view::npos && text[close] == ']' && close + 1 - open <= 24) out.push_back({open, close + 1});
  }
  return out;
}

bool inside(const std::vector<std::pair<size_t, size_t>>& ranges, size_t at) {
  return std::any_of(ranges.begin(), ranges.end(), [&](const auto& r) { return r.first < at && at < r.second; });
}

}  // namespace

std::vector<BreakToken> break_tokens(std::string_view text, const BreakOptions& options) {
  std::vector<std::pair<size_t, size_t>> whole = options.keep_whole;
  if (options.short_brackets) {
    const auto brackets = short_brackets(text);
    whole.insert(whole.end(), brackets.begin(), brackets.end());
  }
  std::vector<BreakToken> out;
  size_t start = 0;
  bool line_start = true;  // the next piece starts a line of `text`
  std::string indent;      // a line's leading spaces, waiting for its first token (options.indentation)
  size_t indent_at = 0;
  for (const LineBreak& b : line_breaks(text)) {
    if (!b.hard && b.at < text.size() && inside(whole, b.at)) continue;
    std::string_view piece = text.substr(start, b.at - start);
    const size_t piece_at = start;
    start = b.at;
    // The '\n' a hard break follows is the break itself. Other characters that force a break
    // (\r, \f, U+2028...) are kept as text, as they were written.
    if (b.hard && !piece.empty() && piece.back() == '\n') piece.remove_suffix(1);
    const size_t ink = piece.find_last_not_of(" \t") + 1;  // npos + 1 == 0: only spaces
    BreakToken t{std::string(piece.substr(0, ink)), std::string(piece.substr(ink)), b.hard, piece_at};
    if (t.text.empty() && !t.hard) {  // only spaces: at the start of a line (ICU keeps others with the text before)
      if (options.indentation && line_start) {
        if (indent.empty()) indent_at = piece_at;
        indent += t.gap;
        continue;
      }
      if (out.empty()) out.push_back(BreakToken{{}, t.gap, false, piece_at});  // spaces before the first token
      continue;  // after a hard break: dropped
    }
    if (!indent.empty()) {
      t.text = indent + t.text;
      t.at = indent_at;
      indent.clear();
    }
    if (t.hard) t.gap.clear();  // spaces before a line break are dropped
    line_start = t.hard;
    out.push_back(std::move(t));
  }
  if (!indent.empty()) out.push_back(BreakToken{indent, {}, false, indent_at});  // a line of spaces only
  return out;
}

}  // namespace furnace::lesson
