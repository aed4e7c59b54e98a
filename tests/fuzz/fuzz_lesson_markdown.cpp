// libFuzzer target for lesson text (lessons/*/en.md, zh.md; lessons/FORMAT.md): parse_markdown and
// render_terminal in runtime/src/lessons/markdown.cpp, over md4c. Byte 0 picks the terminal width
// (20..83) and colour; the rest is the Markdown. Every input is read into a document that renders,
// or rejected with one clear line.
#include <cstddef>
#include <cstdint>
#include <string>

#include "furnace/lesson.h"
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
  return 0;
}
