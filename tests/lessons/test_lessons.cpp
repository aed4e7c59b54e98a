// Every lesson in lessons/ loads, has its text and claims in both languages, and every check of
// every step passes against the runtime: one test per lesson and language, found by listing the
// folder (a new lesson folder is covered without touching this file).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <ostream>
#include <iterator>
#include <filesystem>
#include <string>
#include <vector>

#include "furnace/lesson.h"
#include "lesson_text.h"  // defines: render_terminal (runtime/cli)

namespace {

namespace fs = std::filesystem;
namespace lesson = furnace::lesson;

struct LessonCase {
  std::string folder;
  lesson::Lang lang;
};

// gtest prints parameters in test names and logs: the folder and language, not raw bytes.
void PrintTo(const LessonCase& c, std::ostream* os) {
  *os << fs::path(c.folder).filename().string() << " [" << lesson::lang_name(c.lang) << "]";
}

std::vector<LessonCase> lesson_cases() {
  std::vector<std::string> folders;
  for (const fs::directory_entry& e : fs::directory_iterator(FURNACE_TEST_LESSONS_DIR))
    if (e.is_directory()) folders.push_back(e.path().string());
  std::sort(folders.begin(), folders.end());
  std::vector<LessonCase> out;
  for (const std::string& f : folders)
    for (lesson::Lang lang : lesson::kLangs) out.push_back({f, lang});
  return out;
}

std::string case_name(const ::testing::TestParamInfo<LessonCase>& info) {
  std::string name = fs::path(info.param.folder).filename().string() + "_" + lesson::lang_name(info.param.lang);
  std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return name;
}

class LessonChecks : public ::testing::TestWithParam<LessonCase> {};

TEST_P(LessonChecks, LoadsAndEveryCheckPasses) {
  const LessonCase& c = GetParam();
  lesson::Lesson l;
  try {
    l = lesson::load_lesson(c.folder);
  } catch (const std::exception& e) {
    FAIL() << e.what();
  }
  const lesson::Lang lang = c.lang;
  EXPECT_FALSE(l.title.in(lang).empty());
  EXPECT_FALSE(l.summary.in(lang).empty());
  lesson::LessonRun run(l);
  int checks = 0;
  for (size_t i = 0; i < l.steps.size(); ++i) {
    const lesson::Step& step = l.steps[i];
    SCOPED_TRACE("step " + std::to_string(i + 1) + " '" + step.id + "' (" + c.folder + "/lesson.toml:" +
                 std::to_string(step.line) + ")");
    EXPECT_FALSE(step.title.in(lang).empty());
    EXPECT_FALSE(step.text(lang).blocks.empty());
    EXPECT_FALSE(lesson::render_terminal(step.text(lang)).empty());
    const lesson::StepOutcome& out = run.run_step(i);
    ASSERT_EQ(out.checks.size(), step.checks.size());
    for (size_t k = 0; k < out.checks.size(); ++k) {
      EXPECT_FALSE(step.checks[k].claim.in(lang).empty());
      EXPECT_TRUE(out.checks[k].pass) << "FAIL: " << step.checks[k].claim.in(lang) << "\n  "
                                      << step.checks[k].observable << " = " << out.checks[k].actual << "; "
                                      << out.checks[k].detail();
      ++checks;
    }
    if (step.prediction) {
      ASSERT_TRUE(out.prediction);
      EXPECT_FALSE(step.prediction->question.in(lang).empty());
      EXPECT_TRUE(out.prediction->among_choices) << "the real answer " << out.prediction->shown(lesson::Lang::en)
                                                 << " is not among the choices";
      // The real answer, typed back, is accepted.
      lesson::Missing why;
      const auto real = lesson::lookup(step.prediction->observable, out.observables, {}, &why);
      ASSERT_TRUE(real) << lesson::describe_missing(why, lesson::Lang::en);
      EXPECT_TRUE(lesson::answer_matches(*step.prediction, *real, out.prediction->answer));
    }
  }
  EXPECT_GT(checks, 0);
}

INSTANTIATE_TEST_SUITE_P(Lessons, LessonChecks, ::testing::ValuesIn(lesson_cases()), case_name);

TEST(LessonFolder, EveryFolderIsALessonAndOrdersAreUnique) {
  std::vector<std::string> errors;
  const std::vector<lesson::Lesson> all = lesson::load_lessons(FURNACE_TEST_LESSONS_DIR, &errors);
  for (const std::string& e : errors) ADD_FAILURE() << e;
  EXPECT_GE(all.size(), 6u);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1].order, all[i].order);
}

TEST(LessonFolder, FormatDocumentsEveryActionAndObservable) {
  // lessons/FORMAT.md is what lesson authors read: every action and observable must be in it.
  std::ifstream in(std::string(FURNACE_TEST_LESSONS_DIR) + "/FORMAT.md");
  ASSERT_TRUE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const lesson::ActionInfo& a : lesson::actions()) {
    EXPECT_NE(doc.find("### `" + a.name + "`"), std::string::npos) << a.name;
    for (const lesson::ObservableInfo& o : a.observables)
      EXPECT_NE(doc.find("`" + o.name + "`"), std::string::npos) << a.name << ": " << o.name;
  }
  for (const std::string& p : lesson::panels()) EXPECT_NE(doc.find(p), std::string::npos) << p;
}

}  // namespace
