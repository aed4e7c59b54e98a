// `furnace lesson` as a user runs it: list, run (the text, the prediction with its real answer, PASS
// per claim), check; exit status 0 when every claim passes, 1 when one fails, 2 when a lesson does
// not load; one clear line for bad arguments.
#include <gtest/gtest.h>

#include <pty.h>  // defines: forkpty
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "integration/cli_harness.h"  // defines: CliHarness, CliRun
#include "lessons/lesson_fixture.h"   // defines: kTinyToml, kTinyEn, kTinyZh, replaced

namespace {

using furnace::cli_test::CliRun;
using furnace::lesson_test::kTinyEn;
using furnace::lesson_test::kTinyToml;
using furnace::lesson_test::kTinyZh;
using furnace::lesson_test::replaced;

class LessonCli : public furnace::cli_test::CliHarness {
 protected:
  // A lessons folder holding the tiny lesson with `toml`.
  std::string lessons(const std::string& toml = kTinyToml, const std::string& zh = kTinyZh) {
    write_file("lessons/01-tiny/lesson.toml", toml);
    write_file("lessons/01-tiny/en.md", kTinyEn);
    write_file("lessons/01-tiny/zh.md", zh);
    return (dir_ / "lessons").string();
  }
};

// `furnace lesson ARGS` on a pseudo-terminal (stdin a terminal: the prediction is asked), the
// lines of `typed` already typed, then end of input (Ctrl-D); what the terminal showed.
std::string on_terminal(const std::string& args, const std::vector<std::string>& typed) {
  int terminal = -1;
  const pid_t pid = ::forkpty(&terminal, nullptr, nullptr, nullptr);
  if (pid < 0) return "forkpty failed";
  if (pid == 0) {
    const std::string command = std::string(FURNACE_CLI) + " lesson " + args;
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string input;
  for (const std::string& line : typed) input += line + "\n";
  input += "\x04";  // end of input: a question still asked gets no answer
  [[maybe_unused]] const ssize_t w = ::write(terminal, input.data(), input.size());
  std::string shown;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(terminal, buf, sizeof buf);
    if (n > 0) shown.append(buf, static_cast<size_t>(n));
    else if (n < 0 && errno == EINTR) continue;
    else break;  // EIO: the program has ended
  }
  ::close(terminal);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return shown;
}

// On a terminal the choices are a), b), ...: a letter names a choice, a number is that number
// (choices 2 and 4: "2" meant as "the second" was graded right); anything else is asked again.
TEST_F(LessonCli, OnATerminalChoicesAreLettersAndOtherAnswersAreAskedAgain) {
  const std::string dir = lessons();
  std::string shown = on_terminal("--lessons-dir " + dir + " run 01-tiny", {"x", "", "b"});
  EXPECT_NE(shown.find("a) 2"), std::string::npos) << shown;
  EXPECT_NE(shown.find("b) 4"), std::string::npos) << shown;
  EXPECT_NE(shown.find("type a letter, a to b, or one of the choices as shown"), std::string::npos) << shown;
  EXPECT_NE(shown.find("Your answer: b) 4 -> not quite"), std::string::npos) << shown;
  shown = on_terminal("--lessons-dir " + dir + " run 01-tiny", {"2"});
  EXPECT_NE(shown.find("Your answer: a) 2 -> right"), std::string::npos) << shown;
  shown = on_terminal("--lessons-dir " + dir + " run 01-tiny --lang zh", {"9", "a"});
  EXPECT_NE(shown.find("请输入字母 a 到 b，或照抄一个选项"), std::string::npos) << shown;
  EXPECT_NE(shown.find("你的答案：a) 2 -> 答对了"), std::string::npos) << shown;
}

TEST_F(LessonCli, ListShowsEveryLesson) {
  CliRun r = furnace("lesson list");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("01-single-card"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("06-non-contiguous"), std::string::npos) << r.out;
  r = furnace("lesson list --lang zh");
  EXPECT_NE(r.out.find("单卡调试"), std::string::npos) << r.out;
}

TEST_F(LessonCli, RunPrintsTextPredictionAnswerAndPass) {
  CliRun r = furnace("lesson --lessons-dir " + lessons() + " run 01-tiny");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("The process sees two devices."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Predict: How many?"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("The runtime says: 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS  two devices"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CUDA_VISIBLE_DEVICES=0,1"), std::string::npos) << r.out;
  // The question comes before the text that explains the answer.
  EXPECT_LT(r.out.find("Predict: How many?"), r.out.find("The process sees two devices.")) << r.out;
  r = furnace("lesson --lessons-dir " + lessons() + " run 01-tiny --lang zh --step 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("进程能看到两个设备。"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS  两个设备"), std::string::npos) << r.out;
  // --lessons-dir after the subcommand reaches `lesson` too (it was CLI11's "not expected").
  r = furnace("lesson run 01-tiny --step 1 --lessons-dir " + lessons());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("PASS  two devices"), std::string::npos) << r.out;
  r = furnace("lesson check 01-tiny --lessons-dir " + lessons());
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST_F(LessonCli, FailingCheckExitsWithOne) {
  const std::string dir = lessons(replaced(kTinyToml, "equals = 2", "equals = 3"));
  CliRun r = furnace("lesson --lessons-dir " + dir + " check --all");
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL  01-tiny [en]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("device_count = 2; expected equals 3"), std::string::npos) << r.out;
  r = furnace("lesson --lessons-dir " + dir + " run 01-tiny");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("FAIL  two devices"), std::string::npos) << r.out;
}

TEST_F(LessonCli, PassingCheckExitsWithZero) {
  CliRun r = furnace("lesson --lessons-dir " + lessons() + " check --all");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS  01-tiny [en]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS  01-tiny [zh]"), std::string::npos) << r.out;
  r = furnace("lesson --lessons-dir " + lessons() + " check 01-tiny --lang zh");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("[en]"), std::string::npos) << r.out;
}

TEST_F(LessonCli, BrokenLessonExitsWithTwoNamingFileAndLine) {
  const std::string dir = lessons(replaced(kTinyToml, "[step.scenario]\n", "[step.scenario]\nvisible = \"0\"\n"));
  CliRun r = furnace("lesson --lessons-dir " + dir + " check --all");
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("01-tiny/lesson.toml:15:11: step 'count': scenario: unknown scenario key 'visible'"),
            std::string::npos) << r.err;
  EXPECT_EQ(furnace::cli_test::count_lines(r.err), 1) << r.err;
}

TEST_F(LessonCli, ALessonsTopologyIsANameNeverAPath) {
  const std::string dir = lessons(replaced(kTinyToml, "[step.scenario]\n", "[step.scenario]\ntopology = \"../../../../etc/passwd\"\n"));
  CliRun r = furnace("lesson --lessons-dir " + dir + " list");
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("01-tiny/lesson.toml:15:12: step 'count': scenario: topology: '../../../../etc/passwd' is not a "
                       "name: a lesson names a machine in data/topologies, not a file"),
            std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("TOML"), std::string::npos) << "the file was never opened and parsed: " << r.err;
  EXPECT_EQ(furnace::cli_test::count_lines(r.err), 1) << r.err;
}

TEST_F(LessonCli, ABrokenFolderDoesNotStopAnotherLesson) {
  const std::string dir = lessons();
  write_file("lessons/02-broken/lesson.toml", "id = [\n");
  CliRun r = furnace("lesson --lessons-dir " + dir + " check 01-tiny");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("PASS  01-tiny [en]"), std::string::npos) << r.out;
  r = furnace("lesson --lessons-dir " + dir + " run 01-tiny");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  // The broken folder still stops what needs every lesson, and the lesson it holds.
  EXPECT_EQ(furnace("lesson --lessons-dir " + dir + " check --all").status, 2);
  r = furnace("lesson --lessons-dir " + dir + " check 02-broken");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("02-broken/lesson.toml"), std::string::npos) << r.err;
  // A mistyped id is "no lesson" even beside a broken folder (it used to print the broken folder's
  // errors and nothing about the id).
  r = furnace("lesson --lessons-dir " + dir + " run 01-tiyn");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.err,
            "furnace: error: no lesson '01-tiyn' (lessons: 01-tiny); lessons that do not load are not listed "
            "(`furnace lesson list` says why)\n");
  r = furnace("lesson --lessons-dir " + dir + " run 01-tiyn --lang zh");
  EXPECT_NE(r.err.find("没有叫 '01-tiyn' 的课程（现有的课程：01-tiny）；无法载入的课程不在其中"), std::string::npos) << r.err;
}

TEST_F(LessonCli, AFolderOfNoLessonsAtAllGetsOneLine) {
  // --lessons-dir /etc, say: 76 folders, none a lesson; one line for the folder, not one for each.
  for (const char* d : {"not-lessons/a", "not-lessons/b", "not-lessons/c"}) std::filesystem::create_directories(dir_ / d);
  for (const char* sub : {"list", "check --all"}) {
    const CliRun r = furnace("lesson --lessons-dir " + (dir_ / "not-lessons").string() + " " + sub);
    EXPECT_EQ(r.status, 2) << sub;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("not-lessons: none of its 3 folders is a lesson that loads (the first: "), std::string::npos) << r.err;
  }
}

TEST_F(LessonCli, BadArgumentsGetOneLine) {
  expect_one_line_error("lesson run no-such-lesson", "no lesson 'no-such-lesson'");
  expect_one_line_error("lesson run 01-single-card --lang fr", "--lang must be en or zh");
  expect_one_line_error("lesson run 01-single-card --step 99", "--step 99");
  expect_one_line_error("lesson run 01-single-card --step 0", "--step 0: lesson 01-single-card has steps 1..");
  expect_one_line_error("lesson check", "give a lesson id or --all");
  expect_one_line_error("lesson", "furnace lesson list");
  expect_one_line_error("lesson --lessons-dir /no/such/dir list", "does not exist");
}

// With --lang zh the CLI's own errors come in Chinese, from one catalogue (cli/error_messages.cpp),
// with the variable parts (the id, the step) kept as they were.
TEST_F(LessonCli, BadArgumentsGetOneChineseLineWithLangZh) {
  CliRun r = expect_one_line_error("lesson run no-such-lesson --lang zh", "furnace：错误：没有叫 'no-such-lesson' 的课程（现有的课程：01-single-card");
  EXPECT_EQ(r.err.find("no lesson"), std::string::npos) << r.err;
  expect_one_line_error("lesson run 01-single-card --step 99 --lang zh", "--step 99：课程 01-single-card 只有第 1 到第 ");
  expect_one_line_error("lesson check --lang zh", "要么给出一个课程 id，要么用 --all");
  expect_one_line_error("lesson --lessons-dir /no/such/dir list --lang zh", "/no/such/dir：课程文件夹不存在");
  expect_one_line_error("lesson run no-such-lesson --lang en", "furnace: error: no lesson 'no-such-lesson'");
}

TEST_F(LessonCli, RealLessonsPassHeadless) {
  // The whole suite is covered by test_lessons; here one real lesson end to end through the CLI.
  CliRun r = furnace("lesson run 01-single-card --lang zh");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("运行结果：4"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
}

}  // namespace
