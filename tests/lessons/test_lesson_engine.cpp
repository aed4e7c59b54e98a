// The lesson engine's pieces on their own: Markdown parsing and terminal rendering (CJK widths,
// soft breaks), check evaluation, prediction answers, and a lesson run's order of steps.
#include <gtest/gtest.h>

#include <string>

#include "furnace/unicode_text.h"  // defines: display_width
#include "furnace/lesson.h"
#include "lesson_text.h"  // defines: render_terminal (runtime/cli)
#include "wrap_text.h"    // defines: wrap_text (visualizer/ui)
#include "lessons/lesson_fixture.h"

namespace {

namespace lesson = furnace::lesson;
using lesson::Block;
using lesson::Value;

TEST(LessonMarkdown, BlocksWithLinesAndStyles) {
  const lesson::Document d = lesson::parse_markdown(
      "# Title\n\nSome **bold** and `code`.\n\n- one\n- two\n  1. nested\n\n```python\nx = 1\n```\n\n> quoted\n\n---\n",
      "t.md");
  ASSERT_EQ(d.blocks.size(), 8u);
  EXPECT_EQ(d.blocks[0].kind, Block::Kind::heading);
  EXPECT_EQ(d.blocks[0].level, 1);
  EXPECT_EQ(d.blocks[0].line, 1);
  EXPECT_EQ(d.blocks[1].kind, Block::Kind::paragraph);
  EXPECT_EQ(d.blocks[1].line, 3);
  ASSERT_EQ(d.blocks[1].spans.size(), 5u);
  EXPECT_EQ(d.blocks[1].spans[1].text, "bold");
  EXPECT_EQ(d.blocks[1].spans[1].style, lesson::Span::strong);
  EXPECT_EQ(d.blocks[1].spans[3].style, lesson::Span::code);
  EXPECT_EQ(d.blocks[2].kind, Block::Kind::list_item);
  EXPECT_EQ(d.blocks[2].level, 1);
  EXPECT_EQ(d.blocks[2].number, 0);
  EXPECT_EQ(d.blocks[4].level, 2);
  EXPECT_EQ(d.blocks[4].number, 1);
  EXPECT_EQ(d.blocks[5].kind, Block::Kind::code);
  EXPECT_EQ(d.blocks[5].code, "x = 1\n");
  EXPECT_EQ(d.blocks[5].info, "python");
  EXPECT_EQ(d.blocks[6].quote_depth, 1);
  EXPECT_EQ(d.blocks[7].kind, Block::Kind::rule);
}

TEST(LessonMarkdown, SoftBreaksJoinChineseWithoutSpaces) {
  const lesson::Document d = lesson::parse_markdown("第一行\n第二行 and\nEnglish\n", "t.md");
  ASSERT_EQ(d.blocks.size(), 1u);
  EXPECT_EQ(lesson::spans_text(d.blocks[0].spans), "第一行第二行 and English");
}

// Curly quotes, the ellipsis and the em dash sit between Chinese characters in Chinese text
// (“2”这个, 等等……然后): a source line wrapped next to one must not gain a space there, while
// in English text ("said “yes”\nand") the break stays a space.
TEST(LessonMarkdown, SoftBreaksNextToQuotesJoinChineseOnly) {
  auto text = [](const char* md) { return lesson::spans_text(lesson::parse_markdown(md, "t.md").blocks.at(0).spans); };
  EXPECT_EQ(text("只存在 `cuda:0`，“2”\n这个编号已经没有意义了。\n"), "只存在 cuda:0，“2”这个编号已经没有意义了。");
  EXPECT_EQ(text("几乎成为标配。”\n这两句话\n"), "几乎成为标配。”这两句话");
  EXPECT_EQ(text("他说\n“先打印”\n然后……\n再说\n"), "他说“先打印”然后……再说");
  EXPECT_EQ(text("He said “yes”\nand left.\n"), "He said “yes” and left.");
  EXPECT_EQ(text("a line — then\n“quoted” text\n"), "a line — then “quoted” text");
  EXPECT_EQ(text("显存\n**第一次**使用\n"), "显存第一次使用");
  EXPECT_EQ(text("给每次拷贝计\n`字节数 / 带宽` 再加上\n延迟\n"), "给每次拷贝计 字节数 / 带宽 再加上延迟");  // code: a space
  EXPECT_EQ(text("结果。\n`device_count()` 为 1\n"), "结果。device_count() 为 1");
}

TEST(LessonMarkdown, EntitiesAndHardBreaks) {
  const lesson::Document d = lesson::parse_markdown("a &amp; b &#x4E2D;  \nc\n", "t.md");
  EXPECT_EQ(lesson::spans_text(d.blocks[0].spans), "a & b 中\nc");
}

TEST(LessonMarkdown, DisplayWidthCountsCjkTwice) {
  EXPECT_EQ(furnace::display_width("abc"), 3);
  EXPECT_EQ(furnace::display_width("显存"), 4);
  EXPECT_EQ(furnace::display_width("GPU 数量："), 10);
}

TEST(LessonMarkdown, RendersWithinTheWidthWithoutPunctuationAtALineStart) {
  std::string zh;
  for (int i = 0; i < 30; ++i) zh += "显存，";
  const std::string en = "DataParallel splits every batch along the first dimension into one chunk per GPU, "
                         "and gathers the outputs back.";
  const lesson::Document d = lesson::parse_markdown(zh + "\n\n" + en + "\n\n- " + en + "\n", "t.md");
  const std::string out = lesson::render_terminal(d, 40, false);
  size_t start = 0;
  int lines = 0;
  while (start < out.size()) {
    const size_t end = out.find('\n', start);
    const std::string line = out.substr(start, end - start);
    EXPECT_LE(furnace::display_width(line), 40) << line;
    EXPECT_NE(line.rfind("，", 0), 0u) << "a line starts with a comma: " << line;
    start = end + 1;
    ++lines;
  }
  EXPECT_GT(lines, 8);
  EXPECT_NE(out.find("- DataParallel splits"), std::string::npos) << out;
  EXPECT_NE(out.find("\n  the first dimension"), std::string::npos) << "list continuation lines are indented:\n" << out;
}

// Every line of `out`, without its trailing newline.
std::vector<std::string> lines_of(const std::string& out) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < out.size()) {
    const size_t end = out.find('\n', start);
    lines.push_back(out.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

TEST(LessonMarkdown, CodeSpansAreNotSplitAtTheirSpaces) {
  const lesson::Document d = lesson::parse_markdown(
      "On the whole server, with `device_ids=[1, 0]` (the model on `cuda:1`), the main GPU is it.\n", "t.md");
  for (int width = 20; width <= 60; ++width) {
    const std::string out = lesson::render_terminal(d, width, false);
    EXPECT_NE(out.find("`device_ids=[1, 0]`"), std::string::npos) << "width " << width << ":\n" << out;
    for (const std::string& line : lines_of(out)) EXPECT_LE(furnace::display_width(line), width) << line;
  }
  // A code span wider than the line still breaks, rather than running past the edge.
  const lesson::Document wide = lesson::parse_markdown("Run `furnace train --topology x --steps 3`.\n", "t.md");
  for (const std::string& line : lines_of(lesson::render_terminal(wide, 20, false)))
    EXPECT_LE(furnace::display_width(line), 20) << line;
}

TEST(LessonMarkdown, OpeningPunctuationNeverEndsALine) {
  std::string zh;
  for (int i = 0; i < 12; ++i) zh += "模型（DataParallel 就是）“这样”";
  const lesson::Document d = lesson::parse_markdown(zh + "\n", "t.md");
  for (int width = 16; width <= 40; ++width) {
    const std::vector<std::string> lines = lines_of(lesson::render_terminal(d, width, false));
    ASSERT_GT(lines.size(), 2u);
    for (const std::string& line : lines) {
      EXPECT_LE(furnace::display_width(line), width) << line;
      for (const char* opening : {"（", "“"})
        EXPECT_FALSE(line.size() >= 3 && line.compare(line.size() - 3, 3, opening) == 0)
            << "width " << width << ": a line ends with " << opening << ": " << line;
      for (const char* closing : {"）", "”"}) EXPECT_NE(line.rfind(closing, 0), 0u) << line;
    }
  }
}

// wrap_text measured in terminal columns: the rules the visualizer's Lesson panel draws with.
std::string wrap_columns(std::string_view text, int width) {
  return lesson::wrap_text(text, width, [](std::string_view s) { return furnace::display_width(s); });
}

TEST(LessonWrapText, ChineseBreaksBetweenCharactersAndFillsTheLine) {
  std::string zh;
  for (int i = 0; i < 8; ++i) zh += "四块 GPU 都可见时，device_ids 默认是（全部）可见设备。";
  for (int width = 12; width <= 50; width += 7) {
    const std::vector<std::string> lines = lines_of(wrap_columns(zh, width) + "\n");
    ASSERT_GT(lines.size(), 3u);
    for (size_t k = 0; k < lines.size(); ++k) {
      const std::string& line = lines[k];
      EXPECT_LE(furnace::display_width(line), width) << line;
      // ImGui 1.86 breaks only at spaces, so a line of Chinese used to end at the last space.
      if (k + 1 < lines.size()) EXPECT_GE(furnace::display_width(line), width - 13) << "width " << width << ": " << line;
      EXPECT_NE(line.rfind("，", 0), 0u) << line;
      EXPECT_NE(line.rfind("）", 0), 0u) << line;
      EXPECT_FALSE(line.size() >= 3 && line.compare(line.size() - 3, 3, "（") == 0) << line;
    }
  }
}

TEST(LessonWrapText, EnglishBreaksAtSpacesAndKeepsNonBreakingOnesAndIndentation) {
  EXPECT_EQ(wrap_columns("the quick brown fox jumps", 10), "the quick\nbrown fox\njumps");
  EXPECT_EQ(wrap_columns("use device_ids=[1,\u00A00] here", 20), "use\ndevice_ids=[1,\u00A00]\nhere");
  EXPECT_EQ(wrap_columns("for x in y:\n    z = x  # twice\n\nend", 40), "for x in y:\n    z = x  # twice\n\nend");
  EXPECT_EQ(wrap_columns("    z = x + y", 8), "    z =\nx + y");  // the indentation stays on its line
  EXPECT_EQ(wrap_columns("abcdefghij", 4), "abcd\nefgh\nij");   // wider than the line: cut
  EXPECT_EQ(wrap_columns("uses every visible device: [0, 1]", 31), "uses every visible device:\n[0, 1]");
  EXPECT_EQ(wrap_columns("默认是 [0, 1, 2, 3]，四块", 16), "默认是\n[0, 1, 2, 3]，四\n块");
  EXPECT_EQ(wrap_columns("", 10), "");
  // Code: a broken line continues under its own indentation plus the hanging indent.
  const auto code = [](std::string_view text, int width) {
    return lesson::wrap_text(text, width, [](std::string_view s) { return furnace::display_width(s); }, "    ");
  };
  EXPECT_EQ(code("if x:\n    used.append(h)   # every process\ny = 1", 24),
            "if x:\n    used.append(h)   #\n        every process\ny = 1");
  EXPECT_EQ(code("abcdefghijkl", 8), "abcdefgh\n    ijkl");  // cut, then continued
  // A broken UTF-8 sequence does not swallow the line break after it (found by fuzz_lesson_markdown).
  EXPECT_EQ(wrap_columns(std::string("a\xF0\x00\x00\nb", 7), 10), std::string("a\xF0\x00\x00\nb", 7));
  // A character that forces a break other than '\n' (\r, \f) stays in the text (found by fuzz_lesson_markdown).
  EXPECT_EQ(wrap_columns("a\r\nb\fc", 10), "a\r\nb\f\nc");
}

TEST(LessonMarkdown, CodeIsMarkedWithoutColourAndColouredOnATerminal) {
  const lesson::Document d = lesson::parse_markdown("Call `device_count()` **now**.\n", "t.md");
  EXPECT_EQ(lesson::render_terminal(d, 80, false), "Call `device_count()` now.\n");
  const std::string colour = lesson::render_terminal(d, 80, true);
  EXPECT_NE(colour.find("\x1b[36mdevice_count()\x1b[0m"), std::string::npos) << colour;
  EXPECT_NE(colour.find("\x1b[1mnow\x1b[0m."), std::string::npos) << colour;
}

// ---- checks -------------------------------------------------------------------------------------

lesson::Check check(std::string observable, lesson::Expectation::Op op, Value v) {
  lesson::Check c;
  c.observable = std::move(observable);
  lesson::Expectation e;
  e.op = op;
  e.literal = std::move(v);
  c.expectations.push_back(e);
  return c;
}

lesson::Observables sample() {
  return {{"error", Value::of_string("")},
          {"count", Value::of_int(4)},
          {"mapping", Value::of_string("cuda:0 = GPU 2")},
          {"chunks", Value::of_ints(std::vector<int>{3, 3, 3, 1})},
          {"loss", Value::of_number(2.302585)},
          {"mem", Value::of_ints(std::vector<int64_t>{3000, 1000})}};
}

TEST(LessonChecks, Expectations) {
  using Op = lesson::Expectation::Op;
  const lesson::Observables o = sample();
  EXPECT_TRUE(lesson::evaluate_check(check("count", Op::equals, Value::of_int(4)), o, {}).pass);
  EXPECT_FALSE(lesson::evaluate_check(check("count", Op::equals, Value::of_int(3)), o, {}).pass);
  EXPECT_TRUE(lesson::evaluate_check(check("count", Op::less_than, Value::of_int(5)), o, {}).pass);
  EXPECT_FALSE(lesson::evaluate_check(check("count", Op::greater_than, Value::of_int(4)), o, {}).pass);
  EXPECT_TRUE(lesson::evaluate_check(check("count", Op::at_least, Value::of_int(4)), o, {}).pass);
  EXPECT_TRUE(lesson::evaluate_check(check("mapping", Op::contains, Value::of_string("GPU 2")), o, {}).pass);
  EXPECT_TRUE(lesson::evaluate_check(check("chunks", Op::contains, Value::of_int(1)), o, {}).pass);
  EXPECT_TRUE(lesson::evaluate_check(check("chunks", Op::not_contains, Value::of_int(2)), o, {}).pass);
  EXPECT_TRUE(lesson::evaluate_check(check("chunks[3]", Op::equals, Value::of_int(1)), o, {}).pass);
  EXPECT_TRUE(lesson::evaluate_check(check("chunks", Op::at_least, Value::of_int(1)), o, {}).pass);
  EXPECT_FALSE(lesson::evaluate_check(check("chunks", Op::at_least, Value::of_int(2)), o, {}).pass);
  lesson::Check approx = check("loss", Op::approx, Value::of_number(2.3));
  EXPECT_FALSE(lesson::evaluate_check(approx, o, {}).pass);
  approx.rel_tol = 2e-3;  // |2.302585 - 2.3| = 0.0026 <= 0.0046
  EXPECT_TRUE(lesson::evaluate_check(approx, o, {}).pass);
}

// A check line prints numbers as the lesson text writes them: no exponent for a rate in samples/s.
TEST(LessonChecks, NumbersPrintInPlainDigits) {
  EXPECT_EQ(lesson::format_value(Value::of_number(1003780.4)), "1003780");
  EXPECT_EQ(lesson::format_value(Value::of_number(14472800.0)), "14472800");
  EXPECT_EQ(lesson::format_value(Value::of_number(464729.3)), "464729");
  EXPECT_EQ(lesson::format_value(Value::of_number(0.255)), "0.255");
  EXPECT_EQ(lesson::format_value(Value::of_int(42)), "42");
}

TEST(LessonChecks, ReferencesToOtherObservablesAndEarlierSteps) {
  using Op = lesson::Expectation::Op;
  lesson::Check c;
  c.observable = "mem[0]";
  lesson::Expectation e;
  e.op = Op::greater_than;
  e.of = "mem[1]";
  e.times = 2;
  c.expectations.push_back(e);
  EXPECT_TRUE(lesson::evaluate_check(c, sample(), {}).pass);  // 3000 > 2 x 1000
  c.expectations[0].times = 3;
  const lesson::CheckResult r = lesson::evaluate_check(c, sample(), {});
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.detail().find("3000"), std::string::npos) << r.detail();
  // STEP.NAME reads an earlier step's observables.
  lesson::Observables first{{"count", Value::of_int(4)}};
  c.expectations[0].of = "first.count";
  c.expectations[0].times = 1;
  c.expectations[0].op = Op::less_than;
  EXPECT_FALSE(lesson::evaluate_check(c, sample(), {{"first", first}}).pass);  // 3000 < 4: no
  c.expectations[0].op = Op::greater_than;
  EXPECT_TRUE(lesson::evaluate_check(c, sample(), {{"first", first}}).pass);
  EXPECT_FALSE(lesson::evaluate_check(c, sample(), {}).pass);  // step 'first' has not run
}

TEST(LessonChecks, MissingValuesFailWithTheReason) {
  using Op = lesson::Expectation::Op;
  lesson::Observables failed{{"error", Value::of_string("CUDA error: invalid device ordinal")}};
  lesson::CheckResult r = lesson::evaluate_check(check("count", Op::equals, Value::of_int(4)), failed, {});
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.detail().find("the action failed: CUDA error: invalid device ordinal"), std::string::npos) << r.detail();
  r = lesson::evaluate_check(check("chunks[7]", Op::equals, Value::of_int(1)), sample(), {});
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.detail().find("out of range"), std::string::npos) << r.detail();
}

// The evidence line in either language is built from what was compared, not translated from the
// English text: a literal that holds one of the operators' names stays as the lesson wrote it.
TEST(LessonChecks, DetailsSayTheComparisonInEitherLanguage) {
  using Op = lesson::Expectation::Op;
  using lesson::Lang;
  lesson::Check c = check("mapping", Op::not_contains, Value::of_string("equals GPU 2"));
  lesson::Expectation e;
  e.op = Op::greater_than;
  e.of = "mem[1]";
  e.times = 2;
  lesson::Check both = check("mem[0]", Op::at_most, Value::of_int(5000));
  both.expectations.push_back(e);
  const lesson::Observables o = sample();
  lesson::CheckResult r = lesson::evaluate_check(c, o, {});
  EXPECT_TRUE(r.pass);
  EXPECT_EQ(r.detail(Lang::en), "expected not_contains equals GPU 2");
  EXPECT_EQ(r.detail(Lang::zh), "应当不包含 equals GPU 2");
  r = lesson::evaluate_check(both, o, {});
  EXPECT_TRUE(r.pass);  // 3000 <= 5000 and 3000 > 2 x 1000
  EXPECT_EQ(r.detail(Lang::en), "expected at_most 5000, greater_than mem[1] x 2 (= 2000)");
  EXPECT_EQ(r.detail(Lang::zh), "应当至多 5000, 大于 mem[1] x 2 (= 2000)");
  // Why a comparison could not be made, and why a value is missing.
  r = lesson::evaluate_check(check("mapping", Op::at_least, Value::of_int(1)), o, {});
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.detail(Lang::en), "expected at_least 1 [not a number]");
  EXPECT_EQ(r.detail(Lang::zh), "应当至少 1 [不是数字]");
  r = lesson::evaluate_check(check("chunks[7]", Op::equals, Value::of_int(1)), o, {});
  EXPECT_EQ(r.detail(Lang::en), "'chunks[7]' is out of range: chunks has 4 elements [3, 3, 3, 1]");
  EXPECT_EQ(r.detail(Lang::zh), "'chunks[7]' 超出范围：chunks 只有 4 个元素 [3, 3, 3, 1]");
  e.of = "first.count";
  lesson::Check later = check("count", Op::at_least, Value::of_int(1));
  later.expectations.push_back(e);
  r = lesson::evaluate_check(later, o, {});
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.detail(Lang::en), "first.count: step 'first' has not run");
  EXPECT_EQ(r.detail(Lang::zh), "first.count: 步骤 'first' 还没有运行");
  later.expectations[1].of = "mapping";
  r = lesson::evaluate_check(later, o, {});
  EXPECT_EQ(r.detail(Lang::en), "mapping is not a number (times needs one)");
  // A prediction whose observable the action did not produce says why in the reader's language.
  lesson::Prediction p;
  p.observable = "missing";
  const lesson::PredictionResult pr = lesson::prediction_answer(p, o);
  EXPECT_FALSE(pr.among_choices);
  EXPECT_EQ(pr.shown(Lang::en), "('missing' was not produced)");
  EXPECT_EQ(pr.shown(Lang::zh), "(没有产生 'missing')");
}

TEST(LessonPredictions, AnswersMatchLoosely) {
  lesson::Prediction p;
  p.observable = "chunks";
  const Value chunks = Value::of_ints(std::vector<int>{3, 3, 3, 1});
  EXPECT_TRUE(lesson::answer_matches(p, chunks, "3,3,3,1"));
  EXPECT_TRUE(lesson::answer_matches(p, chunks, "[3, 3, 3, 1]"));
  EXPECT_TRUE(lesson::answer_matches(p, chunks, " 3 3 3 1 "));
  EXPECT_TRUE(lesson::answer_matches(p, chunks, "3，3，3，1"));
  EXPECT_FALSE(lesson::answer_matches(p, chunks, "3,3,3"));
  EXPECT_TRUE(lesson::answer_matches(p, Value::of_int(4), "4.0"));
  EXPECT_TRUE(lesson::answer_matches(p, Value::of_string("cuda:0"), "CUDA:0"));
  EXPECT_FALSE(lesson::answer_matches(p, Value::of_int(4), "four"));
  p.choices = {"[0, 1]", "[0, 1, 2, 3]"};
  const Value ids = Value::of_ints(std::vector<int>{0, 1, 2, 3});
  EXPECT_TRUE(lesson::answer_matches(p, ids, "b"));  // the second choice
  EXPECT_TRUE(lesson::answer_matches(p, ids, "B"));
  EXPECT_FALSE(lesson::answer_matches(p, ids, "a"));
  EXPECT_FALSE(lesson::answer_matches(p, ids, "2"));  // a number is a value, never a choice's place
  const lesson::PredictionResult r = lesson::prediction_answer(p, {{"chunks", ids}});
  EXPECT_EQ(r.answer, "[0, 1, 2, 3]");
  EXPECT_TRUE(r.among_choices);
  p.choices = {"[0]", "[0, 1]"};
  EXPECT_FALSE(lesson::prediction_answer(p, {{"chunks", ids}}).among_choices);
  // Choices that are numbers themselves: the terminal labels them with letters, so a number typed is
  // always that number (lesson 13: choices 2 and 8, the answer 8; "2" was judged right as "the
  // second"; lesson 07: choices 2 and 4, the answer 2; "2" meant as "the second" was right too).
  p.choices = {"2", "8"};
  EXPECT_FALSE(lesson::answer_matches(p, Value::of_int(8), "2"));
  EXPECT_TRUE(lesson::answer_matches(p, Value::of_int(8), "8"));
  EXPECT_TRUE(lesson::answer_matches(p, Value::of_int(8), "8.0"));
  EXPECT_TRUE(lesson::answer_matches(p, Value::of_int(8), "b"));
  EXPECT_FALSE(lesson::answer_matches(p, Value::of_int(8), "a"));
  EXPECT_FALSE(lesson::answer_matches(p, Value::of_int(2), "1"));
}

// What the terminal accepts as an answer to a question with choices (anything else: asked again).
TEST(LessonPredictions, AnAnswerNamesAChoiceByItsLetterOrAsShown) {
  lesson::Prediction p;
  p.observable = "x";
  p.choices = {"0", "1", "5"};
  EXPECT_EQ(lesson::choice_label(0), "a");
  EXPECT_EQ(lesson::choice_label(2), "c");
  EXPECT_EQ(lesson::chosen(p, "a"), std::optional<size_t>(0));
  EXPECT_EQ(lesson::chosen(p, " C "), std::optional<size_t>(2));
  EXPECT_EQ(lesson::chosen(p, "1"), std::optional<size_t>(1));  // the choice 1, not the first
  EXPECT_EQ(lesson::chosen(p, "5.0"), std::optional<size_t>(2));
  EXPECT_EQ(lesson::chosen(p, "d"), std::nullopt);  // past the last choice
  EXPECT_EQ(lesson::chosen(p, "x"), std::nullopt);
  EXPECT_EQ(lesson::chosen(p, "9"), std::nullopt);
  EXPECT_EQ(lesson::chosen(p, ""), std::nullopt);
  p.choices = {"NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 3090"};
  EXPECT_EQ(lesson::chosen(p, "nvidia geforce rtx 3090"), std::optional<size_t>(1));
}

TEST(LessonPredictions, AnOpenQuestionAnsweredByAMessageIsNotJudged) {
  lesson::Prediction p;
  p.observable = "error";
  const Value error = Value::of_string("Invalid device id");
  EXPECT_FALSE(lesson::answer_is_judged(p, error));  // "it fails" is not wrong
  EXPECT_TRUE(lesson::answer_matches(p, error, "invalid device id"));  // ... the exact one is right
  EXPECT_TRUE(lesson::answer_is_judged(p, Value::of_int(4)));
  EXPECT_TRUE(lesson::answer_is_judged(p, Value::of_ints(std::vector<int>{0, 1})));
  p.choices = {"Invalid device id", "it runs"};
  EXPECT_TRUE(lesson::answer_is_judged(p, error));  // with choices, an answer is right or wrong
}

// ---- a lesson run -------------------------------------------------------------------------------

class LessonRunOrder : public furnace::lesson_test::LessonDir {};

TEST_F(LessonRunOrder, JumpingToAStepRunsTheStepsItRefersTo) {
  using furnace::lesson_test::kTinyToml;
  const std::string second =
      "[[step]]\nid = \"more\"\npanel = \"devices\"\naction = \"devices\"\n"
      "[step.scenario]\nenv = { CUDA_VISIBLE_DEVICES = \"0,1,2\" }\n"
      "[[step.check]]\nobservable = \"device_count\"\ngreater_than = { of = \"count.device_count\" }\n"
      "claim.en = \"more\"\nclaim.zh = \"更多\"\n"
      "[[step.check]]\nobservable = \"device_count\"\nequals = 4\n"
      "claim.en = \"wrong on purpose\"\nclaim.zh = \"故意写错\"\n";
  write_tiny(std::string(kTinyToml) + second, std::string(furnace::lesson_test::kTinyEn) + "\n## More {#more}\n\nThree.\n",
             std::string(furnace::lesson_test::kTinyZh) + "\n## 更多 {#more}\n\n三个。\n");
  const lesson::Lesson l = lesson::load_lesson((root_ / "01-tiny").string());
  lesson::LessonRun run(l);
  const lesson::StepOutcome& out = run.run_step(1);
  EXPECT_TRUE(run.has_run(0)) << "step 2 refers to step 1's device_count";
  ASSERT_EQ(out.checks.size(), 2u);
  EXPECT_TRUE(out.checks[0].pass) << out.checks[0].detail();
  EXPECT_FALSE(out.checks[1].pass);
  EXPECT_EQ(out.checks[1].actual, "3");
  EXPECT_FALSE(out.passed);
  EXPECT_EQ(&run.run_step(1), &out) << "a step runs once";
  run.reset();
  EXPECT_FALSE(run.has_run(0));
}

// The "Ran:" line lists the scenario in the order things happen, whatever order the file (or
// TOML, which sorts a table's keys) gives: the frees before empty_cache(), the story before its part.
TEST_F(LessonRunOrder, TheScenarioSummaryFollowsTheOrderThingsHappen) {
  using furnace::lesson_test::kTinyToml;
  using furnace::lesson_test::replaced;
  const std::string memory =
      "[[step]]\nid = \"mem\"\npanel = \"memory\"\naction = \"memory\"\n"
      "[step.scenario]\nempty_cache = true\nfree = [0]\nalloc = [\"1MiB\", \"5MiB\"]\n"
      "[[step.check]]\nobservable = \"memory_allocated_mib\"\nequals = 5\nclaim.en = \"5\"\nclaim.zh = \"5\"\n";
  write_tiny(std::string(kTinyToml) + memory, std::string(furnace::lesson_test::kTinyEn) + "\n## Mem {#mem}\n\nFive.\n",
             std::string(furnace::lesson_test::kTinyZh) + "\n## 显存 {#mem}\n\n五。\n");
  const lesson::Lesson l = lesson::load_lesson((root_ / "01-tiny").string());
  EXPECT_EQ(lesson::scenario_summary(l.steps.at(1)),
            "memory: topology workstation-4x3090, alloc [1MiB,5MiB], free [0], empty_cache()");
  EXPECT_EQ(lesson::scenario_summary(l.steps.at(1), lesson::Lang::zh), lesson::scenario_summary(l.steps.at(1)));
  lesson::Step devices;
  devices.action = "devices";
  devices.setup = lesson::default_setup(devices.action);
  devices.setup.keys = {"set_visible_before_init"};
  std::get<lesson::DevicesSetup>(devices.setup.action).set_visible_before_init = "1";
  EXPECT_EQ(lesson::scenario_summary(devices),
            "devices: topology workstation-4x3090, os.environ['CUDA_VISIBLE_DEVICES']='1' before the first device use");
  EXPECT_EQ(lesson::scenario_summary(devices, lesson::Lang::zh),
            "devices: topology workstation-4x3090, os.environ['CUDA_VISIBLE_DEVICES']='1'（在第一次使用设备之前）");
}

TEST(LessonActions, ErrorsBecomeTheErrorObservableAndEarlierValuesStay) {
  lesson::Step s;
  s.action = "devices";
  s.setup = lesson::default_setup(s.action);
  s.setup.scenario().topology = "workstation-4x3090";
  s.setup.scenario().env = {{"CUDA_VISIBLE_DEVICES", "-1"}};
  const lesson::Observables o = lesson::run_action(s);
  EXPECT_NE(o.at("error").string.find("No CUDA GPUs are available"), std::string::npos) << o.at("error").string;
  EXPECT_EQ(o.at("device_count").number, 0);  // device_count() does not initialise CUDA
  EXPECT_EQ(o.count("current_device"), 0u);
}

// The observables of `train` that only a DistributedDataParallel run produces.
bool ddp_only(const std::string& name) {
  return name.rfind("ddp_", 0) == 0 || name == "allreduce_bytes_per_step" || name == "sent_bytes_per_step" ||
         name == "comm_ms" || name == "exposed_ms";
}

lesson::Observables run_small(const std::string& action, const std::string& parallel) {
  lesson::Step s;
  s.action = action;
  s.setup = lesson::default_setup(action);
  furnace::Scenario& sc = s.setup.scenario();
  sc.topology = "workstation-4x3090";
  sc.max_steps = 2;
  sc.epochs = 1;
  sc.evaluate = false;
  sc.batch = 8;
  sc.parallel = parallel;
  if (auto* m = s.setup.as<lesson::MemorySetup>()) m->alloc = {"1MiB"};
  if (auto* m = s.setup.as<lesson::MachineSetup>()) m->story = "two-jobs";
  return lesson::run_action(s);
}

TEST(LessonActions, EveryObservableOfTheTableIsProduced) {
  // An action that succeeds produces every observable the table (and FORMAT.md) promises: `train`
  // under DataParallel all but the DDP ones, which its DDP run produces (with the rest).
  for (const lesson::ActionInfo& a : lesson::actions()) {
    const std::string parallel = a.name == "train" || a.name == "forward" ? "dp" : "none";
    const lesson::Observables o = run_small(a.name, parallel);
    EXPECT_EQ(o.at("error").string, "") << a.name;
    const lesson::Observables ddp = a.name == "train" ? run_small(a.name, "ddp") : lesson::Observables{};
    if (a.name == "train") EXPECT_EQ(ddp.at("error").string, "") << "train, ddp";
    for (const lesson::ObservableInfo& info : a.observables) {
      const lesson::Observables& from = ddp_only(info.name) ? ddp : o;
      ASSERT_EQ(from.count(info.name), 1u) << a.name << ": " << info.name;
      EXPECT_EQ(from.at(info.name).type, info.type) << a.name << ": " << info.name;
      if (a.name == "train") EXPECT_EQ(ddp.count(info.name), 1u) << "train, ddp: " << info.name;
    }
  }
}

}  // namespace
