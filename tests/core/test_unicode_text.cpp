// furnace/unicode_text.h and furnace/line_breaks.h: ICU's decoding, widths and line breaks (UAX #14
// with Chinese rules), and the one rule added to them (no break inside a run of narrow characters).
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "furnace/line_breaks.h"
#include "furnace/unicode_text.h"

namespace furnace {
namespace {

TEST(UnicodeText, DisplayWidthByEastAsianWidth) {
  EXPECT_EQ(display_width("abc"), 3);
  EXPECT_EQ(display_width("显存"), 4);
  EXPECT_EQ(display_width("GPU 数量："), 10);                // fullwidth colon: 2
  EXPECT_EQ(display_width("，。（）「」"), 12);
  EXPECT_EQ(display_width("“引号”…"), 7);                  // ambiguous quotes and ellipsis: 1 each
  EXPECT_EQ(display_width("e\u0301"), 1);                   // a combining accent takes no column
  EXPECT_EQ(display_width("a\tb\x1b"), 2);                  // control characters: none
  EXPECT_EQ(display_width("\xF0\x9F\x94\xA5"), 2);          // 🔥 (wide emoji)
  EXPECT_EQ(display_width("\uFF21"), 2);                    // Ａ fullwidth Latin
  EXPECT_EQ(display_width("\uAC00\u3042"), 4);              // hangul, kana
}

TEST(UnicodeText, IllFormedUtf8IsOneReplacementPerBadPart) {
  const std::string bad("a\xF0\x00\x00\nb\xC0\xAF\xED\xA0\x80", 11);  // cut short; overlong '/'; a surrogate
  std::vector<char32_t> seen;
  for (size_t i = 0; i < bad.size();) seen.push_back(next_code_point(bad, i));
  ASSERT_GE(seen.size(), 6u);
  EXPECT_EQ(seen[0], U'a');
  EXPECT_EQ(seen[1], U'\uFFFD');
  EXPECT_EQ(seen[2], U'\0');  // the bytes after a broken lead byte are read on their own
  EXPECT_EQ(seen[4], U'\n');
  EXPECT_EQ(seen[5], U'b');
  for (size_t k = 6; k < seen.size(); ++k) EXPECT_EQ(seen[k], U'\uFFFD');
  size_t i = 0;
  EXPECT_EQ(next_code_point("中", i), U'\u4E2D');
  EXPECT_EQ(i, 3u);
}

// The pieces between the break opportunities of `text`; a hard break is marked with '|' at its end.
std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (const LineBreak& b : line_breaks(text)) {
    out.push_back(std::string(text.substr(start, b.at - start)) + (b.hard ? "|" : ""));
    start = b.at;
  }
  return out;
}

using Pieces = std::vector<std::string>;

TEST(LineBreaks, ChinesePunctuationRules) {
  // Between two Chinese characters; never before ，。）” nor after （“.
  EXPECT_EQ(pieces("模型（DataParallel 就是）“这样”。"),
            (Pieces{"模", "型", "（DataParallel ", "就", "是）", "“这", "样”。"}));
  EXPECT_EQ(pieces("显存，显存。然后……再说"), (Pieces{"显", "存，", "显", "存。", "然", "后……", "再", "说"}));
  EXPECT_EQ(pieces("「引用」《书名》"), (Pieces{"「引", "用」", "《书", "名》"}));
}

TEST(LineBreaks, LatinWordsPathsAndFlagsStayWhole) {
  // UAX #14 alone would break after "-" and "/".
  EXPECT_EQ(pieces("per-GPU --device-ids a/b https://x.org/a/b cuda:0 1.5 don’t"),
            (Pieces{"per-GPU ", "--device-ids ", "a/b ", "https://x.org/a/b ", "cuda:0 ", "1.5 ", "don’t"}));
  EXPECT_EQ(pieces("the  quick\tfox"), (Pieces{"the  ", "quick\t", "fox"}));
  EXPECT_EQ(pieces("use\u00A0it"), (Pieces{"use\u00A0it"}));  // no-break space
  EXPECT_EQ(pieces("四块GPU都"), (Pieces{"四", "块", "GPU", "都"}));
}

TEST(LineBreaks, HardBreaksAndEdges) {
  EXPECT_TRUE(line_breaks("").empty());
  EXPECT_EQ(pieces("a\n\nb  \nc"), (Pieces{"a\n|", "\n|", "b  \n|", "c"}));
  EXPECT_EQ(pieces("x\r\ny"), (Pieces{"x\r\n|", "y"}));
  EXPECT_EQ(pieces("   lead"), (Pieces{"   ", "lead"}));
  // Ill-formed UTF-8 is read as U+FFFD: breaks fall on byte offsets inside the text, the last at its end.
  const std::string bad("\xE4\xB8 \xFF\xFE\n\xE4\xB8\xAD", 9);
  const std::vector<LineBreak> b = line_breaks(bad);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.back().at, bad.size());
  for (size_t k = 1; k < b.size(); ++k) EXPECT_LT(b[k - 1].at, b[k].at);
}

// A unit wider than a line is cut where it overflows, but not before ，。）” nor after （“.
TEST(LineBreaks, CutsInsideAnOverlongUnitAvoidPunctuationAtTheEdges) {
  EXPECT_TRUE(may_cut_at("abc", 1));
  EXPECT_FALSE(may_cut_at("ab）c", 2));   // the next line would start with ）
  EXPECT_FALSE(may_cut_at("ab”c", 2));
  EXPECT_FALSE(may_cut_at("a（bc", 4));   // this line would end with （
  EXPECT_FALSE(may_cut_at("a“bc", 4));
  EXPECT_EQ(nearest_cut("ab）c", 2), 1u);
  EXPECT_EQ(nearest_cut("abc，。d", 3), 2u);
  EXPECT_EQ(nearest_cut("（x", 3), 3u);   // nothing acceptable before: the cut stays
  EXPECT_EQ(nearest_cut("abcd", 2), 2u);
}

}  // namespace
}  // namespace furnace
