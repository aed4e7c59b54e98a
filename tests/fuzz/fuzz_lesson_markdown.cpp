// libFuzzer target for lesson text (lessons/*/en.md, zh.md; lessons/FORMAT.md): parse_markdown
// (runtime/src/lessons/markdown.cpp, over md4c), the CLI's render_terminal (runtime/cli/
// lesson_text.cpp) and the visualizer's wrap_text (visualizer/ui/wrap_text.cpp) on every block's
// text, both breaking lines by furnace/cjk_text.h. Byte 0 picks the terminal width (20..83) and colour; the rest is the
// Markdown. Every input is read into a document that renders, or rejected with one clear line;
// wrapped text keeps every non-space character, in order, and no line is wider than the width.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "furnace/unicode_text.h"  // defines: display_width
#include "furnace/lesson.h"
#include "lesson_text.h"  // defines: render_terminal
#include "wrap_text.h"    // defines: wrap_text
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace furnace;
  if (size == 0) return 0;
  const int width = 20 + (data[0] & 63);
  const bool color = data[0] & 64;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  lesson::Document doc;
  if (!fuzz::accepts([&] { doc = lesson::parse_markdown(text, "fuzz.md"); })) return 0;
  fuzz::accepts([&] { (void)lesson::render_terminal(doc, width, color); });
  auto columns = [](std::string_view s) { return static_cast<double>(furnace::display_width(s)); };
  for (const lesson::Block& b : doc.blocks) {
    const std::string in = b.kind == lesson::Block::Kind::code ? b.code : lesson::spans_text(b.spans);
    const std::string out = lesson::wrap_text(in, width, columns, data[0] & 128 ? "    " : "");
    std::string kept_in, kept_out;  // wrapping only moves line breaks and spaces
    for (char c : in)
      if (c != ' ' && c != '\n' && c != '\t') kept_in += c;
    for (char c : out)
      if (c != ' ' && c != '\n' && c != '\t') kept_out += c;
    if (kept_in != kept_out) __builtin_trap();
    size_t start = 0;
    while (start <= out.size()) {
      size_t end = out.find('\n', start);
      if (end == std::string::npos) end = out.size();
      if (furnace::display_width(std::string_view(out.data() + start, end - start)) > width) __builtin_trap();
      start = end + 1;
    }
  }
  return 0;
}
