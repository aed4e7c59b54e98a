// A lesson with a mistake is rejected when it loads, with one line naming the file and the line:
// each test breaks the small valid lesson of lesson_fixture.h in one way.
#include <gtest/gtest.h>

#include <string>

#include "furnace/error.h"
#include "furnace/lesson.h"
#include "lessons/lesson_fixture.h"

namespace {

using furnace::lesson_test::kTinyEn;
using furnace::lesson_test::kTinyToml;
using furnace::lesson_test::kTinyZh;
using furnace::lesson_test::replaced;
namespace lesson = furnace::lesson;

class LessonErrors : public furnace::lesson_test::LessonDir {
 protected:
  // Loads the lesson and expects an error whose message starts with "<folder>/<file>:<line>:" and
  // contains `needle`; `line` 0 accepts any line.
  void expect_error(const std::string& file, int line, const std::string& needle) {
    const std::string folder = (root_ / "01-tiny").string();
    try {
      lesson::load_lesson(folder);
      ADD_FAILURE() << "the lesson loaded; expected an error containing '" << needle << "'";
    } catch (const furnace::Error& e) {
      const std::string m = e.what();
      const std::string where = folder + "/" + file + ":" + (line > 0 ? std::to_string(line) + ":" : "");
      EXPECT_EQ(m.rfind(where, 0), 0u) << "expected it to start with '" << where << "': " << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    }
  }
};

TEST_F(LessonErrors, TheFixtureItselfLoadsAndPasses) {
  write_tiny();
  const lesson::Lesson l = lesson::load_lesson((root_ / "01-tiny").string());
  ASSERT_EQ(l.steps.size(), 1u);
  EXPECT_EQ(l.steps[0].title.en, "Count them");
  EXPECT_EQ(l.steps[0].title.zh, "数一数");
  lesson::LessonRun run(l);
  const lesson::StepOutcome& out = run.run_step(0);
  EXPECT_TRUE(out.passed);
  ASSERT_TRUE(out.prediction);
  EXPECT_EQ(out.prediction->answer, "2");
}

TEST_F(LessonErrors, MissingFieldNamesTheStepTable) {
  write_tiny(replaced(kTinyToml, "panel = \"devices\"\n", ""));
  expect_error("lesson.toml", 10, "missing 'panel'");
}

TEST_F(LessonErrors, MissingTopLevelField) {
  write_tiny(replaced(kTinyToml, "article_section = \"1\"\n", ""));
  expect_error("lesson.toml", 0, "missing 'article_section'");
}

TEST_F(LessonErrors, MissingChineseClaim) {
  write_tiny(replaced(kTinyToml, "claim.zh = \"两个设备\"\n", ""));
  expect_error("lesson.toml", 0, "missing 'zh'");
}

TEST_F(LessonErrors, UnknownScenarioKey) {
  write_tiny(replaced(kTinyToml, "env = { CUDA_VISIBLE_DEVICES = \"0,1\" }\n",
                      "env = { CUDA_VISIBLE_DEVICES = \"0,1\" }\nvisible = \"0,1\"\n"));
  expect_error("lesson.toml", 16, "unknown scenario key 'visible'");
}

TEST_F(LessonErrors, ScenarioKeyTheActionDoesNotRead) {
  write_tiny(replaced(kTinyToml, "env = { CUDA_VISIBLE_DEVICES = \"0,1\" }\n",
                      "env = { CUDA_VISIBLE_DEVICES = \"0,1\" }\nbatch = 8\n"));
  expect_error("lesson.toml", 16, "scenario key 'batch' is not used by action 'devices'");
}

TEST_F(LessonErrors, DistributedDataParallelOutsideTrain) {
  // DDP starts the processes of a training run: a one-process action refuses it, on its line.
  write_tiny(replaced(replaced(kTinyToml, "action = \"devices\"", "action = \"forward\""),
                      "env = { CUDA_VISIBLE_DEVICES = \"0,1\" }\n", "parallel = \"ddp\"\n"));
  expect_error("lesson.toml", 15, "'parallel = \"ddp\"' is for action 'train' only");
}

TEST_F(LessonErrors, UnknownEnvironmentVariable) {
  write_tiny(replaced(kTinyToml, "env = { CUDA_VISIBLE_DEVICES = \"0,1\" }", "env = { CUDA_VISIBLE_DEVICE = \"0,1\" }"));
  expect_error("lesson.toml", 15, "did you mean 'CUDA_VISIBLE_DEVICES'");
}

TEST_F(LessonErrors, UnknownTopology) {
  write_tiny(replaced(kTinyToml, "[step.scenario]\n", "[step.scenario]\ntopology = \"no-such-machine\"\n"));
  expect_error("lesson.toml", 15, "topology");
}

TEST_F(LessonErrors, UnknownObservable) {
  write_tiny(replaced(kTinyToml, "observable = \"device_count\"\nequals", "observable = \"device_cnt\"\nequals"));
  expect_error("lesson.toml", 22, "unknown observable 'device_cnt'");
}

TEST_F(LessonErrors, CheckOnAnObservableTheActionDoesNotProduce) {
  // chunks is produced by forward and train, not by devices.
  write_tiny(replaced(kTinyToml, "observable = \"device_count\"\nequals = 2", "observable = \"chunks\"\nequals = [2]"));
  expect_error("lesson.toml", 22, "action 'devices' produces");
}

TEST_F(LessonErrors, ReferenceToAnotherObservableThatDoesNotExist) {
  write_tiny(replaced(kTinyToml, "equals = 2\n", "equals = { of = \"gpu_cont\" }\n"));
  expect_error("lesson.toml", 23, "unknown observable 'gpu_cont'");
}

TEST_F(LessonErrors, ReferenceToALaterOrUnknownStep) {
  write_tiny(replaced(kTinyToml, "equals = 2\n", "equals = { of = \"later.device_count\" }\n"));
  expect_error("lesson.toml", 23, "no step 'later'");
}

TEST_F(LessonErrors, IndexIntoAScalar) {
  write_tiny(replaced(kTinyToml, "observable = \"device_count\"\nequals", "observable = \"device_count[0]\"\nequals"));
  expect_error("lesson.toml", 22, "not an array");
}

TEST_F(LessonErrors, NumericComparisonOnAString) {
  write_tiny(replaced(kTinyToml, "observable = \"device_count\"\nequals = 2", "observable = \"mapping\"\nless_than = 2"));
  expect_error("lesson.toml", 23, "compares numbers");
}

TEST_F(LessonErrors, CheckWithoutExpectation) {
  write_tiny(replaced(kTinyToml, "equals = 2\n", ""));
  expect_error("lesson.toml", 21, "no expectation");
}

TEST_F(LessonErrors, UnknownPanelAndAction) {
  write_tiny(replaced(kTinyToml, "panel = \"devices\"", "panel = \"device\""));
  expect_error("lesson.toml", 12, "did you mean 'devices'");
  write_tiny(replaced(kTinyToml, "action = \"devices\"", "action = \"train-model\""));
  expect_error("lesson.toml", 13, "unknown action 'train-model'");
}

TEST_F(LessonErrors, WrongType) {
  write_tiny(replaced(kTinyToml, "order = 1", "order = \"1\""));
  expect_error("lesson.toml", 2, "'order' must be an integer");
}

TEST_F(LessonErrors, BadToml) {
  write_tiny(replaced(kTinyToml, "id = \"count\"", "id = \"count"));
  expect_error("lesson.toml", 11, "");
}

TEST_F(LessonErrors, IdMustMatchTheFolder) {
  write_tiny(replaced(kTinyToml, "id = \"01-tiny\"", "id = \"01-small\""));
  expect_error("lesson.toml", 1, "must equal the folder name");
}

TEST_F(LessonErrors, StepWithoutTextInChinese) {
  write_tiny(kTinyToml, kTinyEn, "# 小\n\n引言。\n");
  expect_error("zh.md", 0, "no section for step 'count'");
}

TEST_F(LessonErrors, MissingLanguageFile) {
  write_tiny(kTinyToml, kTinyEn, "");
  expect_error("zh.md", 0, "missing");
}

TEST_F(LessonErrors, SectionWithoutStepIdOrForAnUnknownStep) {
  write_tiny(kTinyToml, "## Count them\n\nText.\n", kTinyZh);
  expect_error("en.md", 1, "has no step id");
  write_tiny(kTinyToml, "## Count {#count}\n\nText.\n\n## More {#more}\n\nText.\n", kTinyZh);
  expect_error("en.md", 5, "no step 'more'");
}

TEST_F(LessonErrors, EmptySection) {
  write_tiny(kTinyToml, kTinyEn, "# 小\n\n## 数一数 {#count}\n");
  expect_error("zh.md", 3, "has no text");
}

TEST_F(LessonErrors, UnsupportedMarkdown) {
  write_tiny(kTinyToml, kTinyEn, "## 数一数 {#count}\n\n| a | b |\n|---|---|\n| 1 | 2 |\n");
  expect_error("zh.md", 3, "a table is not supported");
  write_tiny(kTinyToml, "## Count {#count}\n\nSee ![gpu](gpu.png) here.\n", kTinyZh);
  expect_error("en.md", 3, "an image is not supported");
  write_tiny(kTinyToml, "## Count {#count}\n\n<div>raw</div>\n", kTinyZh);
  expect_error("en.md", 3, "raw HTML is not supported");
}

TEST_F(LessonErrors, PredictionAboutAnotherStep) {
  write_tiny(replaced(kTinyToml, "observable = \"device_count\"\nchoices", "observable = \"count.device_count\"\nchoices"));
  expect_error("lesson.toml", 19, "names another step");
}

TEST_F(LessonErrors, LoadLessonsCollectsErrorsAndDuplicateOrders) {
  write_tiny();
  write_lesson("02-copy", replaced(replaced(kTinyToml, "01-tiny", "02-copy"), "order = 1", "order = 1"), kTinyEn, kTinyZh);
  write_lesson("03-broken", replaced(replaced(kTinyToml, "01-tiny", "03-broken"), "order = 1", "order = 3\nunknown = 1"),
               kTinyEn, kTinyZh);
  std::vector<std::string> errors;
  const std::vector<lesson::Lesson> ok = lesson::load_lessons(root_.string(), &errors);
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].id, "01-tiny");
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("order 1 is also the order of 01-tiny"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("03-broken/lesson.toml:3:"), std::string::npos) << errors[1];
  EXPECT_THROW(lesson::load_lessons(root_.string()), furnace::Error);
}

}  // namespace
