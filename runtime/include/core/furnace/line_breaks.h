// furnace/line_breaks.h: where a line of UTF-8 text may break, by Unicode's line-breaking
// algorithm (UAX #14, ICU's line BreakIterator with its Chinese rules): after spaces, between two
// Chinese characters, never before closing punctuation (，。：）」” …) nor after opening
// punctuation (（「“), and always after a '\n'. One rule is added: a run of narrow characters
// without a space (a word, a path, a flag, a number, per-GPU) is never broken inside, where UAX #14
// would allow a break after '-' or '/'. The terminal renderer of the lessons and the visualizer's
// wrapping both lay out lines by these breaks (through furnace/cjk_text.h's break_tokens). Not
// here: widths (furnace/unicode_text.h), laying the pieces into lines.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace furnace {

struct LineBreak {
  size_t at = 0;      // a line may end just before byte `at` (the text's size: its end)
  bool hard = false;  // a line must end here (after '\n' or another mandatory break)
};

// The break opportunities of `utf8`, in order, the last one at utf8.size() (none for ""). The
// spaces before a break belong to the text before it. Ill-formed UTF-8 is read as U+FFFD.
std::vector<LineBreak> line_breaks(std::string_view utf8);

// A unit wider than a whole line has to be cut somewhere: whether a cut just before byte `at` (a
// character boundary inside `utf8`) is acceptable, i.e. the next line does not start with a
// character UAX #14 never breaks before (closing punctuation ，。）” ! ? : ;) and this one does not
// end with one it never breaks after (opening punctuation （“ and quotes that open).
bool may_cut_at(std::string_view utf8, size_t at);
// The cut to make in a unit wider than a line when `fit` bytes of it fit: `fit`, or the nearest
// acceptable cut before it (may_cut_at), or `fit` again when there is none but the start.
size_t nearest_cut(std::string_view utf8, size_t fit);

}  // namespace furnace
