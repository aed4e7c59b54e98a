// The lesson engine's pieces on their own: Markdown parsing and terminal rendering (CJK widths,
// soft breaks), check evaluation, prediction answers, and a lesson run's order of steps.
#include <gtest/gtest.h>

#include <string>

#include "furnace/lesson.h"
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

TEST(LessonMarkdown, EntitiesAndHardBreaks) {
  const lesson::Document d = lesson::parse_markdown("a &amp; b &#x4E2D;  \nc\n", "t.md");
  EXPECT_EQ(lesson::spans_text(d.blocks[0].spans), "a & b 中\nc");
}

TEST(LessonMarkdown, DisplayWidthCountsCjkTwice) {
  EXPECT_EQ(lesson::display_width("abc"), 3);
  EXPECT_EQ(lesson::display_width("显存"), 4);
  EXPECT_EQ(lesson::display_width("GPU 数量："), 10);
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
    EXPECT_LE(lesson::display_width(line), 40) << line;
    EXPECT_NE(line.rfind("，", 0), 0u) << "a line starts with a comma: " << line;
    start = end + 1;
    ++lines;
  }
  EXPECT_GT(lines, 8);
  EXPECT_NE(out.find("- DataParallel splits"), std::string::npos) << out;
  EXPECT_NE(out.find("\n  the first dimension"), std::string::npos) << "list continuation lines are indented:\n" << out;
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
  EXPECT_NE(r.detail.find("3000"), std::string::npos) << r.detail;
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
  EXPECT_NE(r.detail.find("the action failed: CUDA error: invalid device ordinal"), std::string::npos) << r.detail;
  r = lesson::evaluate_check(check("chunks[7]", Op::equals, Value::of_int(1)), sample(), {});
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.detail.find("out of range"), std::string::npos) << r.detail;
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
  EXPECT_TRUE(lesson::answer_matches(p, ids, "2"));  // the second choice
  EXPECT_FALSE(lesson::answer_matches(p, ids, "1"));
  const lesson::PredictionResult r = lesson::prediction_answer(p, {{"chunks", ids}});
  EXPECT_EQ(r.answer, "[0, 1, 2, 3]");
  EXPECT_TRUE(r.among_choices);
  p.choices = {"[0]", "[0, 1]"};
  EXPECT_FALSE(lesson::prediction_answer(p, {{"chunks", ids}}).among_choices);
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
  EXPECT_TRUE(out.checks[0].pass) << out.checks[0].detail;
  EXPECT_FALSE(out.checks[1].pass);
  EXPECT_EQ(out.checks[1].actual, "3");
  EXPECT_FALSE(out.passed);
  EXPECT_EQ(&run.run_step(1), &out) << "a step runs once";
  run.reset();
  EXPECT_FALSE(run.has_run(0));
}

TEST(LessonActions, ErrorsBecomeTheErrorObservableAndEarlierValuesStay) {
  lesson::Step s;
  s.action = "devices";
  s.scenario.scenario.topology = "workstation-4x3090";
  s.scenario.scenario.env = {{"CUDA_VISIBLE_DEVICES", "-1"}};
  const lesson::Observables o = lesson::run_action(s);
  EXPECT_NE(o.at("error").string.find("No CUDA GPUs are available"), std::string::npos) << o.at("error").string;
  EXPECT_EQ(o.at("device_count").number, 0);  // device_count() does not initialise CUDA
  EXPECT_EQ(o.count("current_device"), 0u);
}

TEST(LessonActions, EveryObservableOfTheTableIsProduced) {
  // An action that succeeds produces every observable the table (and FORMAT.md) promises, except
  // the DataParallel-only ones of `train` when it runs on one device.
  for (const lesson::ActionInfo& a : lesson::actions()) {
    lesson::Step s;
    s.action = a.name;
    s.scenario.scenario.topology = "workstation-4x3090";
    s.scenario.scenario.max_steps = 2;
    s.scenario.scenario.epochs = 1;
    s.scenario.scenario.evaluate = false;
    s.scenario.scenario.batch = 8;
    s.scenario.scenario.parallel = a.name == "train" || a.name == "forward" ? "dp" : "none";
    s.scenario.alloc = {"1MiB"};
    s.scenario.story = "two-jobs";
    const lesson::Observables o = lesson::run_action(s);
    EXPECT_EQ(o.at("error").string, "") << a.name;
    for (const lesson::ObservableInfo& info : a.observables) {
      ASSERT_EQ(o.count(info.name), 1u) << a.name << ": " << info.name;
      EXPECT_EQ(o.at(info.name).type, info.type) << a.name << ": " << info.name;
    }
  }
}

}  // namespace
