// The line breaking of every lesson's text, in both readers (the terminal's render_terminal and the
// Lesson panel's wrap_text, measured here in terminal columns), at several widths: no line wider
// than the width, no line starting with closing punctuation (，。）” ...) or ending with opening
// punctuation (（“ ...), no Latin word, path or flag split, and code spans narrower than the line
// kept on one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "furnace/lesson.h"        // defines: parse_markdown, Document, Block, spans_text
#include "furnace/unicode_text.h"  // defines: display_width, next_code_point, is_wide
#include "lesson_text.h"           // defines: render_terminal (runtime/cli)
#include "wrap_text.h"             // defines: wrap_text (visualizer/ui)

namespace furnace::lesson {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start || end < text.size()) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The first and last characters of `line` past its indentation, list mark and quote bars.
std::pair<char32_t, char32_t> ends_of(const std::string& line) {
  size_t i = line.find_first_not_of(" |");
  if (i != std::string::npos && (line.compare(i, 2, "- ") == 0)) i += 2;
  if (i == std::string::npos || i >= line.size()) return {0, 0};
  const char32_t first = next_code_point(line, i);
  char32_t last = first;
  while (i < line.size()) last = next_code_point(line, i);
  return {first, last};
}

bool is_closing(char32_t c) {
  return std::u32string_view(U"，。、；：？！）」』》〉”’…】").find(c) != std::u32string_view::npos;
}
bool is_opening(char32_t c) { return std::u32string_view(U"（「『《〈“‘【").find(c) != std::u32string_view::npos; }

// The runs of narrow, non-space characters of `text` (words, paths, flags, numbers).
std::vector<std::string> latin_runs(const std::string& text) {
  std::vector<std::string> runs;
  std::string run;
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const char32_t c = next_code_point(text, i);
    if (c != ' ' && c != '\n' && c != '\t' && code_point_width(c) == 1 && c != U'\u00A0') {
      run.append(text, start, i - start);
    } else if (!run.empty()) {
      runs.push_back(std::move(run));
      run.clear();
    }
  }
  if (!run.empty()) runs.push_back(run);
  return runs;
}

// Every rule on the lines of one block of text wrapped to `width`.
void expect_wrapped_well(const std::string& source, const std::string& out, int width,
                         const std::vector<std::string>& whole, const std::string& where) {
  const std::vector<std::string> lines = lines_of(out);
  for (const std::string& line : lines) {
    EXPECT_LE(display_width(line), width) << where << ": a line wider than " << width << ":\n" << line;
    const auto [first, last] = ends_of(line);
    EXPECT_FALSE(is_closing(first)) << where << ": a line starts with closing punctuation:\n" << line;
    EXPECT_FALSE(is_opening(last)) << where << ": a line ends with opening punctuation:\n" << line;
  }
  auto on_one_line = [&](const std::string& s) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(s) != std::string::npos; });
  };
  for (const std::string& run : latin_runs(source))
    if (display_width(run) <= width / 2)
      EXPECT_TRUE(on_one_line(run)) << where << ": \"" << run << "\" is split:\n" << out;
  for (const std::string& code : whole)
    if (display_width(code) + 2 <= width / 2)
      EXPECT_TRUE(on_one_line(code)) << where << ": code span `" << code << "` is split:\n" << out;
}

// The spans as the terminal shows them without colour: code in backticks, a link with its address.
std::string shown_text(const std::vector<Span>& spans) {
  std::string out;
  for (const Span& s : spans) {
    std::string text = s.text;
    if ((s.style & Span::link) && !s.href.empty() && s.href != text) text += " (" + s.href + ")";
    out += (s.style & Span::code) ? "`" + text + "`" : text;
  }
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(LessonLineWrapping, EveryLessonInBothReadersAtSeveralWidths) {
  int blocks = 0;
  for (const auto& entry : fs::directory_iterator(FURNACE_TEST_LESSONS_DIR)) {
    for (const char* lang : {"en.md", "zh.md"}) {
      const fs::path file = entry.path() / lang;
      if (!fs::exists(file)) continue;
      const Document doc = parse_markdown(slurp(file), file.string());
      for (const Block& b : doc.blocks) {
        if (b.kind == Block::Kind::code || b.kind == Block::Kind::rule) continue;
        ++blocks;
        std::vector<std::string> code;
        for (const Span& s : b.spans)
          if ((s.style & Span::code) && s.text.find('\n') == std::string::npos) code.push_back(s.text);
        const std::string text = spans_text(b.spans);
        for (int width : {24, 41, 60, 80}) {
          const std::string where = file.string() + ":" + std::to_string(b.line) + " at width " + std::to_string(width);
          expect_wrapped_well(shown_text(b.spans), render_terminal(Document{{b}}, width, false), width, code,
                              "terminal " + where);
          const std::string gui = wrap_text(text, width, [](std::string_view s) { return display_width(s); });
          expect_wrapped_well(text, gui, width, {}, "panel " + where);
        }
      }
    }
  }
  EXPECT_GT(blocks, 200);  // every lesson was read
}

}  // namespace
}  // namespace furnace::lesson
