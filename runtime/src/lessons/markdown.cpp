// markdown.cpp: lesson text (CommonMark) parsed by md4c into a flat list of blocks the terminal
// renderer (runtime/cli/lesson_text.cpp) and the visualizer both draw. Not here: how a lesson's
// text is split into steps (lesson_file.cpp), drawing it, or where its lines break
// (furnace/cjk_text.h).
#include <md4c.h>  // defines: md_parse, MD_PARSER, MD_BLOCK_*, MD_SPAN_*, MD_TEXT_*

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "furnace/error.h"   // defines: FURNACE_CHECK, FURNACE_FAIL
#include "furnace/cjk_text.h"      // defines: is_*_punctuation
#include "furnace/unicode_text.h"  // defines: next_code_point, previous_code_point, is_wide
#include "furnace/lesson.h"    // defines: Document, Block, Span, parse_markdown, spans_text

namespace furnace::lesson {
namespace {

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
  return i == 0 ? 0 : previous_code_point(s, i);
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

}  // namespace furnace::lesson
