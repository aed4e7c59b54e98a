// line_breaks.cpp: furnace/line_breaks.h over ICU's line BreakIterator (UAX #14) for Chinese,
// whose rules treat “ ” as the opening and closing quotes of Chinese text.
#include "furnace/line_breaks.h"

#include <unicode/brkiter.h>  // defines: icu::BreakIterator, UBRK_LINE_HARD
#include <unicode/uchar.h>    // defines: u_isUWhiteSpace, u_getIntPropertyValue, UCHAR_LINE_BREAK
#include <unicode/utext.h>    // defines: utext_openUTF8, utext_close

#include <memory>

#include "furnace/error.h"         // defines: FURNACE_CHECK
#include "furnace/unicode_text.h"  // defines: next_code_point, previous_code_point, code_point_width

namespace furnace {
namespace {

// One iterator per thread: creating one loads its rules, and an iterator is not shared safely.
icu::BreakIterator& line_iterator() {
  thread_local const std::unique_ptr<icu::BreakIterator> iterator = [] {
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::BreakIterator> made(icu::BreakIterator::createLineInstance(icu::Locale::getChinese(), status));
    FURNACE_CHECK(U_SUCCESS(status) && made) << "ICU has no line-break rules (" << u_errorName(status) << ")";
    return made;
  }();
  return *iterator;
}

// A narrow character that is not a space: part of a word, a path or a flag.
bool narrow_ink(char32_t c) { return code_point_width(c) == 1 && !u_isUWhiteSpace(static_cast<UChar32>(c)); }

// The code point that ends just before byte `at`.
char32_t code_point_before(std::string_view s, size_t at) { return previous_code_point(s, at); }

struct UTextCloser {
  void operator()(UText* t) const { utext_close(t); }
};

// Characters a line never starts with: UAX #14's classes with no break before them, and closing
// quotes (” ’ », which the Chinese rules treat as closing).
bool never_starts_line(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  switch (u_getIntPropertyValue(cp, UCHAR_LINE_BREAK)) {
    case U_LB_CLOSE_PUNCTUATION:
    case U_LB_CLOSE_PARENTHESIS:
    case U_LB_EXCLAMATION:
    case U_LB_INFIX_NUMERIC:
    case U_LB_NONSTARTER:
    case U_LB_INSEPARABLE:
      return true;
    default:
      return u_charType(cp) == U_FINAL_PUNCTUATION;
  }
}

// Characters a line never ends with: opening punctuation and quotes that open.
bool never_ends_line(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  return u_getIntPropertyValue(cp, UCHAR_LINE_BREAK) == U_LB_OPEN_PUNCTUATION || u_charType(cp) == U_INITIAL_PUNCTUATION;
}

}  // namespace

bool may_cut_at(std::string_view utf8, size_t at) {
  if (at == 0 || at >= utf8.size()) return true;
  size_t after = at;
  return !never_ends_line(code_point_before(utf8, at)) && !never_starts_line(next_code_point(utf8, after));
}

size_t nearest_cut(std::string_view utf8, size_t fit) {
  size_t back = fit;
  while (back > 0 && !may_cut_at(utf8, back)) previous_code_point(utf8, back);
  return back > 0 ? back : fit;
}

std::vector<LineBreak> line_breaks(std::string_view utf8) {
  std::vector<LineBreak> out;
  if (utf8.empty()) return out;
  FURNACE_CHECK(utf8.size() < (size_t{1} << 31)) << "text of " << utf8.size() << " bytes is too long to break into lines";
  UErrorCode status = U_ZERO_ERROR;
  const std::unique_ptr<UText, UTextCloser> text(
      utext_openUTF8(nullptr, utf8.data(), static_cast<int64_t>(utf8.size()), &status));
  FURNACE_CHECK(U_SUCCESS(status)) << "ICU cannot read the text (" << u_errorName(status) << ")";
  icu::BreakIterator& it = line_iterator();
  it.setText(text.get(), status);
  FURNACE_CHECK(U_SUCCESS(status)) << "ICU cannot break the text (" << u_errorName(status) << ")";
  for (int32_t at = it.next(); at != icu::BreakIterator::DONE; at = it.next()) {
    const auto pos = static_cast<size_t>(at);
    const int32_t rule = it.getRuleStatus();
    const bool hard = rule >= UBRK_LINE_HARD && rule < UBRK_LINE_HARD_LIMIT;
    if (!hard && pos < utf8.size()) {
      size_t next = pos;
      if (narrow_ink(code_point_before(utf8, pos)) && narrow_ink(next_code_point(utf8, next))) continue;
    }
    out.push_back({pos, hard});
  }
  return out;
}

}  // namespace furnace
