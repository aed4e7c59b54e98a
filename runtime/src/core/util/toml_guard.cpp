// toml_ascii: a small scanner that knows TOML's strings and comments and rewrites every non-ASCII
// character into an equivalent ASCII form (furnace/toml_reader.h says why).
#include "furnace/toml_reader.h"

#include <unicode/utf8.h>  // defines: U8_NEXT

#include <cstdint>
#include <cstdio>
#include <utility>

#include "furnace/error.h"  // defines: FURNACE_FAIL

namespace furnace {
namespace {

// The UTF-8 character starting at t[i] (a byte >= 0x80): its code point and byte count, or a
// count of 0 when the bytes are not UTF-8 (bad lead or continuation byte, overlong form,
// surrogate, beyond U+10FFFF, cut short): ICU's validated decoding.
std::pair<char32_t, size_t> decode_utf8(std::string_view t, size_t i) {
  const std::string_view window = t.substr(i, 4);  // a character is four bytes at most
  int32_t n = 0;
  UChar32 cp = 0;
  U8_NEXT(window.data(), n, static_cast<int32_t>(window.size()), cp);
  if (cp < 0) return {0, 0};
  return {static_cast<char32_t>(cp), static_cast<size_t>(n)};
}

// The TOML escape of a code point: \uXXXX, or \UXXXXXXXX beyond the basic plane.
std::string escape_of(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", static_cast<unsigned>(cp));
  return buf;
}

}  // namespace

std::string toml_ascii(std::string_view text, const std::string& origin) {
  // Where the scanner is. Literal strings are rewritten as basic strings as they are copied.
  enum class In { code, comment, basic, literal, multi_basic, multi_literal };
  In in = In::code;
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  int line = 1;
  size_t line_start = 0;
  auto starts = [&](size_t i, std::string_view s) { return text.substr(i, s.size()) == s; };
  auto fail = [&](size_t i, const char* what) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[i]));
    FURNACE_FAIL() << origin << ':' << line << ':' << (i - line_start + 1) << ": byte " << byte << ' ' << what;
  };
  // A closing """ (or ''') at i may come after one or two quotes of the content: """a""""" is the
  // string a"". Returns the index just past the delimiter.
  auto close_multi = [&](size_t i) {
    size_t end = i + 3;
    while (end < text.size() && text[end] == text[i] && end - i < 5) ++end;
    return end;
  };

  size_t i = 0;
  // A rewritten literal string's quote next to a '"' of the text would merge with it ('x'"" would
  // read as """ ...): a space keeps them apart. Two adjacent strings are a syntax error in TOML
  // anyway, and stay one.
  auto keep_apart = [&] {
    if ((!out.empty() && out.back() == '"' && i < text.size() && text[i] == '\'') ||
        (i < text.size() && text[i] == '"' && !out.empty() && out.back() == '"'))
      out += ' ';
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
      // A single-line string left open ends here (left open in the output too: toml++ reports it).
      if (in == In::comment || in == In::basic || in == In::literal) in = In::code;
      out += c;
      ++i;
      continue;
    }
    if (static_cast<unsigned char>(c) >= 0x80) {
      const auto [cp, n] = decode_utf8(text, i);
      if (n == 0) fail(i, "is not UTF-8");
      if (in == In::code) fail(i, "starts a non-ASCII character outside a string or comment");
      out += in == In::comment ? std::string("?") : escape_of(cp);  // a comment's text is ignored
      i += n;
      continue;
    }
    // A backslash in a basic string: it and the escaped byte are copied as they are (an escaped
    // quote is no delimiter). A line-ending backslash is copied alone: the newline is counted above.
    if (c == '\\' && (in == In::basic || in == In::multi_basic)) {
      out += c;
      ++i;
      if (i < text.size() && static_cast<unsigned char>(text[i]) >= 0x80)
        fail(i, "follows a backslash (TOML's escapes are ASCII)");
      if (i < text.size() && text[i] != '\n') out += text[i++];
      continue;
    }
    switch (in) {
      case In::code:
        if (c == '#') in = In::comment;
        if (c == '"' || c == '\'') {
          const bool multi = starts(i, std::string(3, c));
          in = c == '"' ? (multi ? In::multi_basic : In::basic) : (multi ? In::multi_literal : In::literal);
          if (c == '\'') keep_apart();
          out += multi ? "\"\"\"" : "\"";
          i += multi ? 3 : 1;
          continue;
        }
        out += c;
        break;
      case In::comment:
        out += c;
        break;
      case In::basic:
        if (c == '"') in = In::code;
        out += c;
        break;
      case In::literal:  // '...' -> "...": the same value once backslashes and quotes are escaped
        if (c == '\'') {
          in = In::code;
          out += '"';
          ++i;
          keep_apart();
          continue;
        } else {
          if (c == '\\' || c == '"') out += '\\';
          out += c;
        }
        break;
      case In::multi_basic:
        if (starts(i, "\"\"\"")) {
          const size_t end = close_multi(i);
          out.append(text.substr(i, end - i));
          i = end;
          in = In::code;
          continue;
        }
        out += c;
        break;
      case In::multi_literal:  // '''...''' -> """...""", as above
        if (starts(i, "'''")) {
          const size_t end = close_multi(i);
          out.append(end - i - 3, '\'');  // quotes of the content, then the delimiter
          out += "\"\"\"";
          i = end;
          in = In::code;
          keep_apart();
          continue;
        }
        if (c == '\\' || c == '"') out += '\\';
        out += c;
        break;
    }
    ++i;
  }
  return out;
}

}  // namespace furnace
