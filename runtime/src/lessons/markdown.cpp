// markdown.cpp: lesson text (CommonMark) parsed by md4c into a flat list of blocks the terminal
// renderer and the visualizer both draw, and the terminal renderer itself (CJK-aware wrapping).
// Not here: how a lesson's text is split into steps (loader.cpp).
//
// [SECTION] parsing  [SECTION] terminal rendering
#include <md4c.h>  // defines: md_parse, MD_PARSER, MD_BLOCK_*, MD_SPAN_*, MD_TEXT_*

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "furnace/error.h"   // defines: FURNACE_CHECK, FURNACE_FAIL
#include "furnace/lesson.h"  // defines: Document, Block, Span, parse_markdown, render_terminal
#include "lessons/cjk_text.h"  // defines: next_code_point, is_wide, is_*_punctuation

namespace furnace::lesson {
namespace {

// ---- [SECTION] parsing --------------------------------------------------------------------------

struct Builder {
  std::string_view source;
  std::string origin;
  Document doc;
  std::vector<int> list_numbers;  // per open list: the next item number (0 for bullets)
  int quote_depth = 0;
  uint8_t style = Span::plain;
  std::string href;
  int open = -1;                // index of the block text goes to; -1: none
  bool item_started = false;    // the open list item has received its first paragraph
  int last_line = 1;
  std::string unsupported;      // set by enter_block/enter_span; reported with the next line
  int unsupported_line = 0;     // the line of the first text inside the unsupported element
  bool in_code = false;

  int line_of(const char* p) {
    if (p >= source.data() && p <= source.data() + source.size())
      last_line = 1 + static_cast<int>(std::count(source.data(), p, '\n'));
    return last_line;
  }

  Block& start(Block::Kind kind) {
    Block b;
    b.kind = kind;
    b.quote_depth = quote_depth;
    b.line = last_line;
    doc.blocks.push_back(std::move(b));
    open = static_cast<int>(doc.blocks.size()) - 1;
    return doc.blocks.back();
  }
  Block* current() { return open < 0 ? nullptr : &doc.blocks[static_cast<size_t>(open)]; }

  void add_text(std::string_view text) {
    if (open < 0) start(Block::Kind::paragraph).level = static_cast<int>(list_numbers.size());
    std::vector<Span>& spans = current()->spans;
    if (!spans.empty() && spans.back().style == style && spans.back().href == href) {
      spans.back().text += text;
    } else {
      spans.push_back({std::string(text), style, href});
    }
  }
};

std::string attribute_text(const MD_ATTRIBUTE& a) { return std::string(a.text, a.size); }

std::string decode_entity(std::string_view e) {
  if (e == "&amp;") return "&";
  if (e == "&lt;") return "<";
  if (e == "&gt;") return ">";
  if (e == "&quot;") return "\"";
  if (e == "&apos;") return "'";
  if (e == "&nbsp;") return " ";
  if (e.size() > 3 && e[1] == '#') {
    const bool hex = e[2] == 'x' || e[2] == 'X';
    const std::string digits(e.substr(hex ? 3 : 2, e.size() - (hex ? 4 : 3)));
    char32_t c = 0;
    try {
      c = static_cast<char32_t>(std::stoul(digits, nullptr, hex ? 16 : 10));
    } catch (const std::exception&) {
      return std::string(e);
    }
    std::string out;
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
    return out;
  }
  return std::string(e);
}

int enter_block(MD_BLOCKTYPE type, void* detail, void* user) {
  auto& b = *static_cast<Builder*>(user);
  switch (type) {
    case MD_BLOCK_DOC: break;
    case MD_BLOCK_QUOTE: ++b.quote_depth; b.open = -1; break;
    case MD_BLOCK_UL: b.list_numbers.push_back(0); b.open = -1; break;
    case MD_BLOCK_OL:
      b.list_numbers.push_back(static_cast<int>(static_cast<MD_BLOCK_OL_DETAIL*>(detail)->start));
      b.open = -1;
      break;
    case MD_BLOCK_LI: {
      Block& item = b.start(Block::Kind::list_item);
      item.level = static_cast<int>(b.list_numbers.size());
      item.number = b.list_numbers.back();
      if (b.list_numbers.back() > 0) ++b.list_numbers.back();
      b.item_started = false;
      break;
    }
    case MD_BLOCK_HR: b.start(Block::Kind::rule); b.open = -1; break;
    case MD_BLOCK_H: b.start(Block::Kind::heading).level = static_cast<int>(static_cast<MD_BLOCK_H_DETAIL*>(detail)->level); break;
    case MD_BLOCK_CODE: {
      Block& code = b.start(Block::Kind::code);
      code.info = attribute_text(static_cast<MD_BLOCK_CODE_DETAIL*>(detail)->info);
      code.level = static_cast<int>(b.list_numbers.size());
      b.in_code = true;
      break;
    }
    case MD_BLOCK_P:
      // A list item's first paragraph is the item itself; later ones are paragraphs at its depth.
      if (b.current() && b.current()->kind == Block::Kind::list_item && !b.item_started) {
        b.item_started = true;
      } else {
        b.start(Block::Kind::paragraph).level = static_cast<int>(b.list_numbers.size());
      }
      break;
    case MD_BLOCK_HTML: b.unsupported = "raw HTML"; break;
    case MD_BLOCK_TABLE: b.unsupported = "a table"; break;
    default: break;  // table parts: the table itself was reported
  }
  return 0;
}

int leave_block(MD_BLOCKTYPE type, void* /*detail*/, void* user) {
  auto& b = *static_cast<Builder*>(user);
  switch (type) {
    case MD_BLOCK_QUOTE: --b.quote_depth; b.open = -1; break;
    case MD_BLOCK_UL:
    case MD_BLOCK_OL: b.list_numbers.pop_back(); b.open = -1; break;
    case MD_BLOCK_LI: b.open = -1; break;
    case MD_BLOCK_CODE: b.in_code = false; b.open = -1; break;
    case MD_BLOCK_P:
    case MD_BLOCK_H: b.open = -1; break;
    default: break;
  }
  return 0;
}

int enter_span(MD_SPANTYPE type, void* detail, void* user) {
  auto& b = *static_cast<Builder*>(user);
  switch (type) {
    case MD_SPAN_EM: b.style |= Span::emphasis; break;
    case MD_SPAN_STRONG: b.style |= Span::strong; break;
    case MD_SPAN_CODE: b.style |= Span::code; break;
    case MD_SPAN_A:
      b.style |= Span::link;
      b.href = attribute_text(static_cast<MD_SPAN_A_DETAIL*>(detail)->href);
      break;
    case MD_SPAN_IMG: b.unsupported = "an image"; break;
    default: break;
  }
  return 0;
}

int leave_span(MD_SPANTYPE type, void* /*detail*/, void* user) {
  auto& b = *static_cast<Builder*>(user);
  switch (type) {
    case MD_SPAN_EM: b.style &= static_cast<uint8_t>(~Span::emphasis); break;
    case MD_SPAN_STRONG: b.style &= static_cast<uint8_t>(~Span::strong); break;
    case MD_SPAN_CODE: b.style &= static_cast<uint8_t>(~Span::code); break;
    case MD_SPAN_A: b.style &= static_cast<uint8_t>(~Span::link); b.href.clear(); break;
    default: break;
  }
  return 0;
}

int on_text(MD_TEXTTYPE type, const MD_CHAR* text, MD_SIZE size, void* user) {
  auto& b = *static_cast<Builder*>(user);
  if (b.unsupported_line > 0) return 1;  // already failed (md4c may call once more)
  const int line = b.line_of(text);
  if (type == MD_TEXT_HTML && b.unsupported.empty()) b.unsupported = "raw HTML";
  if (!b.unsupported.empty()) {  // stop md_parse: no exception through C code
    b.unsupported_line = line;
    return 1;
  }
  Block* open = b.current();
  if (open && open->spans.empty() && open->code.empty()) open->line = line;
  const std::string_view t(text, size);
  if (b.in_code && open) {
    open->code += t;
    return 0;
  }
  switch (type) {
    case MD_TEXT_BR: b.add_text("\n"); break;
    case MD_TEXT_SOFTBR: b.add_text("\x1f"); break;  // a soft break: resolved by finish()
    case MD_TEXT_ENTITY: b.add_text(decode_entity(t)); break;
    case MD_TEXT_NULLCHAR: b.add_text("\xEF\xBF\xBD"); break;
    default: b.add_text(t); break;
  }
  return 0;
}

// The last code point of `s` (0 when empty).
char32_t last_code_point(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i == 0) return 0;
  --i;
  return next_code_point(s, i);
}

// Whether a soft line break between `prev` and `next` is read as nothing (Chinese text wrapped in
// the source) rather than as a space (between Latin words).
bool soft_break_joins(char32_t prev, char32_t next) {
  if (is_cjk_punctuation(prev) || is_cjk_punctuation(next)) return true;
  return (is_wide(prev) || is_shared_punctuation(prev)) && (is_wide(next) || is_shared_punctuation(next)) &&
         (is_wide(prev) || is_wide(next));
}

// A soft line break is a space between Latin words but nothing between two CJK characters
// (Chinese text wrapped in the source must not gain spaces), nor between a CJK character and
// the quotes or dashes next to it (“2”\n这个). The neighbours may sit in the spans before and
// after (`进程\n**第一次**`). Code counts as Latin text: Chinese text keeps a space next to it
// (计\n`字节数 / 带宽`), and a line break inside a code span is a space.
void resolve_soft_breaks(std::vector<Span>& spans) {
  constexpr char32_t kLatin = U'a';
  for (size_t k = 0; k < spans.size(); ++k) {
    const std::string& s = spans[k].text;
    const bool code = spans[k].style & Span::code;
    std::string out;
    size_t i = 0;
    char32_t prev = k == 0 ? 0 : (spans[k - 1].style & Span::code) ? kLatin : last_code_point(spans[k - 1].text);
    while (i < s.size()) {
      if (s[i] == '\x1f') {
        ++i;
        size_t j = i;
        char32_t next = j < s.size() ? next_code_point(s, j) : 0;
        for (size_t n = k + 1; next == 0 && n < spans.size(); ++n) {
          size_t z = 0;
          if (!spans[n].text.empty()) next = (spans[n].style & Span::code) ? kLatin : next_code_point(spans[n].text, z);
        }
        if (code || !soft_break_joins(prev, next)) out += ' ';
        continue;
      }
      const size_t start = i;
      prev = next_code_point(s, i);
      out.append(s, start, i - start);
    }
    spans[k].text = std::move(out);
  }
}

}  // namespace

Document parse_markdown(std::string_view markdown, const std::string& origin) {
  Builder b;
  b.source = markdown;
  b.origin = origin;
  MD_PARSER parser{};
  parser.flags = MD_FLAG_TABLES;  // recognised so that they can be rejected
  parser.enter_block = enter_block;
  parser.leave_block = leave_block;
  parser.enter_span = enter_span;
  parser.leave_span = leave_span;
  parser.text = on_text;
  const int rc = md_parse(markdown.data(), static_cast<MD_SIZE>(markdown.size()), &parser, &b);
  if (!b.unsupported.empty()) {  // reported at the line of the text that followed it
    FURNACE_FAIL() << origin << ":" << (b.unsupported_line > 0 ? b.unsupported_line : b.last_line) << ": "
                   << b.unsupported << " is not supported in lesson text";
  }
  FURNACE_CHECK(rc == 0) << origin << ": the Markdown could not be parsed (md4c error " << rc << ")";
  for (Block& block : b.doc.blocks) resolve_soft_breaks(block.spans);
  // Empty paragraphs (a list item whose text went into a nested block) are dropped.
  std::erase_if(b.doc.blocks, [](const Block& x) {
    return x.kind == Block::Kind::paragraph && x.spans.empty();
  });
  return std::move(b.doc);
}

std::string spans_text(const std::vector<Span>& spans) {
  std::string out;
  for (const Span& s : spans) out += s.text;
  return out;
}

int display_width(std::string_view utf8) {
  int w = 0;
  size_t i = 0;
  while (i < utf8.size()) {
    const char32_t c = next_code_point(utf8, i);
    w += is_wide(c) ? 2 : (c < 0x20 ? 0 : 1);
  }
  return w;
}

// ---- [SECTION] terminal rendering ---------------------------------------------------------------

namespace {

constexpr const char* kBold = "\x1b[1m";
constexpr const char* kCyan = "\x1b[36m";
constexpr const char* kReset = "\x1b[0m";

// A piece of text that wraps as a unit: a Latin word (with its trailing space) or one CJK char.
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
    Piece cur;
    bool opened = false;  // cur ends with opening punctuation: the next character joins it
    auto flush = [&] {
      cur.opens = opened;
      if (!cur.text.empty()) mine.push_back(std::move(cur));
      cur = Piece{};
      opened = false;
    };
    auto previous = [&]() -> Piece* {
      return !mine.empty() ? &mine.back() : !out.empty() ? &out.back() : nullptr;
    };
    size_t i = 0;
    while (i < text.size()) {
      const size_t start = i;
      const char32_t c = next_code_point(text, i);
      const int w = is_wide(c) ? 2 : 1;
      if (whole) {
        cur.text.append(text, start, i - start);
        cur.width += w;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\n') {
        flush();
        if (Piece* p = previous()) (c == '\n' ? p->newline_after : p->space_after) = true;
        continue;
      }
      // A Latin character joins the current word (a narrow closing mark such as ” after a CJK
      // character joins the piece before it, below).
      if (!is_wide(c) && !is_opening_punctuation(c) && !(is_closing_punctuation(c) && cur.text.empty())) {
        cur.text.append(text, start, i - start);
        cur.width += 1;
        opened = false;
        continue;
      }
      Piece* p = previous();
      if (is_closing_punctuation(c) && (!cur.text.empty() || (p && !p->space_after && !p->newline_after))) {
        Piece& into = !cur.text.empty() ? cur : *p;  // never at the start of a line
        into.text.append(text, start, i - start);
        into.width += w;
        if (&into == &cur) flush();  // a line may break after it
        continue;
      }
      if (!opened) flush();
      cur.text.append(text, start, i - start);
      cur.width += w;
      opened = is_opening_punctuation(c);
      if (!opened) flush();  // one CJK character is one piece
    }
    flush();
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
