// A small valid lesson written to a scratch folder, for the tests that break it one way at a time
// (test_lesson_errors.cpp) and the CLI's exit codes (test_lesson_cli.cpp).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace furnace::lesson_test {

namespace fs = std::filesystem;

// Line numbers matter: the tests expect errors at these lines.
inline const char* kTinyToml =
    "id = \"01-tiny\"\n"                                   // 1
    "order = 1\n"                                          // 2
    "title.en = \"Tiny\"\n"                                // 3
    "title.zh = \"小\"\n"                                  // 4
    "summary.en = \"Two GPUs.\"\n"                         // 5
    "summary.zh = \"两块 GPU。\"\n"                         // 6
    "article_section = \"1\"\n"                            // 7
    "pitfalls = [2]\n"                                     // 8
    "\n"                                                   // 9
    "[[step]]\n"                                           // 10
    "id = \"count\"\n"                                     // 11
    "panel = \"devices\"\n"                                // 12
    "action = \"devices\"\n"                               // 13
    "[step.scenario]\n"                                    // 14
    "env = { CUDA_VISIBLE_DEVICES = \"0,1\" }\n"           // 15
    "[step.prediction]\n"                                  // 16
    "question.en = \"How many?\"\n"                        // 17
    "question.zh = \"几个？\"\n"                            // 18
    "observable = \"device_count\"\n"                      // 19
    "choices = [\"2\", \"4\"]\n"                           // 20
    "[[step.check]]\n"                                     // 21
    "observable = \"device_count\"\n"                      // 22
    "equals = 2\n"                                         // 23
    "claim.en = \"two devices\"\n"                         // 24
    "claim.zh = \"两个设备\"\n";                            // 25

inline const char* kTinyEn = "# Tiny\n\nIntro.\n\n## Count them {#count}\n\nThe process sees two devices.\n";
inline const char* kTinyZh = "# 小\n\n引言。\n\n## 数一数 {#count}\n\n进程能看到两个设备。\n";

// A scratch lessons folder (removed afterwards) and helpers to write a lesson into it.
class LessonDir : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("furnace_lessons_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes lesson `id` with the three texts; returns its folder.
  fs::path write_lesson(const std::string& id, const std::string& toml, const std::string& en,
                        const std::string& zh) {
    const fs::path d = root_ / id;
    fs::create_directories(d);
    std::ofstream(d / "lesson.toml", std::ios::binary) << toml;
    if (!en.empty()) std::ofstream(d / "en.md", std::ios::binary) << en;
    if (!zh.empty()) std::ofstream(d / "zh.md", std::ios::binary) << zh;
    return d;
  }
  fs::path write_tiny(const std::string& toml = kTinyToml, const std::string& en = kTinyEn,
                      const std::string& zh = kTinyZh) {
    return write_lesson("01-tiny", toml, en, zh);
  }

  fs::path root_;
};

// `text` with the first occurrence of `from` replaced by `to` (the test fails if it is absent).
inline std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "fixture has no '" << from << "'";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

}  // namespace furnace::lesson_test
