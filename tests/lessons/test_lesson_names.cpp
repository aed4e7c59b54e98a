// The lesson name matchers (runtime/src/lessons/lesson_names.h) against the std::regex patterns they
// replaced (the loader used them until fuzz_lesson_file overflowed the stack with a long step id):
// on every string of up to 5 characters over an alphabet of each pattern's interesting characters,
// and on samples, both say the same; and a name of 100,000 characters is answered, not a crash.
#include <gtest/gtest.h>

#include <functional>
#include <regex>
#include <string>

#include "lessons/lesson_names.h"  // defines: names::is_slug, is_lesson_id, is_place, parse_ref, parse_step_heading

namespace {

namespace names = furnace::lesson::names;

// Calls `f` with every string of length 0..max_len over `alphabet`.
void for_each_string(const std::string& alphabet, size_t max_len, const std::function<void(const std::string&)>& f) {
  std::string s;
  std::function<void()> grow = [&] {
    f(s);
    if (s.size() == max_len) return;
    for (char c : alphabet) {
      s.push_back(c);
      grow();
      s.pop_back();
    }
  };
  grow();
}

TEST(LessonNames, SlugsAndLessonIdsMatchTheirRegexes) {
  const std::regex slug("^[a-z0-9]+(-[a-z0-9]+)*$"), lesson_id("^[0-9]{2}-[a-z0-9]+(-[a-z0-9]+)*$");
  for_each_string("a0-Z_.", 5, [&](const std::string& s) {
    EXPECT_EQ(names::is_slug(s), std::regex_match(s, slug)) << "'" << s << "'";
  });
  for_each_string("01-aZ", 6, [&](const std::string& s) {
    EXPECT_EQ(names::is_lesson_id(s), std::regex_match(s, lesson_id)) << "'" << s << "'";
  });
  EXPECT_TRUE(names::is_lesson_id("01-single-card"));
  EXPECT_FALSE(names::is_lesson_id("1-single-card"));
}

TEST(LessonNames, PlacesMatchTheirRegex) {
  const std::regex place("cpu|cuda:[0-9]{1,3}");
  for (const char* s : {"cpu", "cuda:0", "cuda:12", "cuda:123", "cuda:1234", "cuda:", "cuda", "cuda:x", "CPU", "cpu0",
                        " cpu", "cuda:-1", "cuda:1 "})
    EXPECT_EQ(names::is_place(s), std::regex_match(std::string(s), place)) << s;
}

TEST(LessonNames, ObservableReferencesMatchTheirRegex) {
  const std::regex ref(R"(^(?:([a-z0-9-]+)\.)?([a-z_0-9]+)(\[([0-9]{1,6})\])?$)");
  auto agree = [&](const std::string& s) {
    std::smatch m;
    const bool matched = std::regex_match(s, m, ref);
    const std::optional<names::Ref> r = names::parse_ref(s);
    ASSERT_EQ(r.has_value(), matched) << "'" << s << "'";
    if (!matched) return;
    EXPECT_EQ(r->step.has_value(), m[1].matched) << s;
    if (r->step) EXPECT_EQ(*r->step, m[1].str()) << s;
    EXPECT_EQ(r->name, m[2].str()) << s;
    EXPECT_EQ(r->indexed, m[3].matched) << s;
  };
  for_each_string("a_-.[]1", 5, agree);
  for (const char* s : {"device_count", "physical[0]", "mask-one.physical[3]", "x[1234567]", "x[123456]", "a.b.c",
                        "step.name[]", "STEP.name", "s.n[1]x"})
    agree(s);
}

TEST(LessonNames, StepHeadingsMatchTheirRegex) {
  const std::regex heading(R"(^(.*?)\s*\{#([a-z0-9-]+)\}\s*$)");
  auto agree = [&](const std::string& s) {
    std::smatch m;
    const bool matched = std::regex_match(s, m, heading);
    const std::optional<names::StepHeading> h = names::parse_step_heading(s);
    ASSERT_EQ(h.has_value(), matched) << "'" << s << "'";
    if (!matched) return;
    EXPECT_EQ(h->title, m[1].str()) << s;
    EXPECT_EQ(h->id, m[2].str()) << s;
  };
  for_each_string("T {#a}\n", 6, agree);
  for (const char* s : {"Mask one GPU {#mask-one}", "Title {#a} {#b}", "{#a{#b}", "Two\nlines {#x}", "Title\n{#x}\n",
                        "T {#A}", "T {# a}", "T {#a} x", "\t{#a}"})
    agree(s);
}

TEST(LessonNames, AVeryLongNameIsAnsweredNotACrash) {
  std::string words;
  for (int i = 0; i < 50000; ++i) words += "a-";
  words += "a";
  EXPECT_TRUE(names::is_slug(words));
  EXPECT_FALSE(names::is_lesson_id(words));
  EXPECT_TRUE(names::parse_ref(std::string(100000, 'a')).has_value());
  const std::optional<names::StepHeading> h = names::parse_step_heading(std::string(100000, 'x') + " {#" + words + "}");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->id, words);
}

}  // namespace
