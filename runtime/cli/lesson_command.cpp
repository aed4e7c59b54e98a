// `furnace lesson list | run ID | check --all|ID`: the guided lessons of lessons/ (FORMAT.md)
// headless. `run` asks each step's prediction first (on a terminal; otherwise prints the
// question), runs the step on the simulator, then prints its text, the real answer and PASS or
// FAIL for every claim; `check` runs every step of one or all lessons without questions. Exit status: 0
// all passed, 1 a check failed, 2 a lesson did not load. Not here: the engine (furnace/lesson.h) or drawing lesson text (lesson_text.cpp).
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"        // defines: add_lesson_command
#include "error_messages.h"  // defines: in_language
#include "furnace/error.h"   // defines: Error, FURNACE_CHECK
#include "furnace/lesson.h"    // defines: load_lessons, LessonRun, ...
#include "lesson_text.h"       // defines: render_terminal
#include "text_table.h"        // defines: format_table

namespace furnace::cli {
namespace {

using lesson::Lang;

struct LessonOptions {
  std::string lessons_dir;
  std::string lang = "en";
  std::string id;
  std::optional<int> step;  // 1-based; none: every step
  bool all = false;
  std::vector<std::string> langs;  // check: --lang given once or more
};

// The labels of the headless output, in the lesson's language.
struct Labels {
  const char* step;        // "Step %d of %d"
  const char* predict;     // "Predict"
  const char* your;        // "Your answer"
  const char* right;
  const char* wrong;
  const char* answer;      // "The runtime says"
  const char* ran;         // "Ran"
  const char* raised;      // "The runtime raised"
  const char* checks;      // "Checks"
  const char* summary;     // "%d of %d claims passed"
  const char* colon;       // ": " or a full-width colon
};
const Labels& labels(Lang lang) {
  static const Labels en{"Step %d of %d", "Predict", "Your answer", "right", "not quite",
                         "The runtime says", "Ran", "The runtime raised", "Checks",
                         "%d of %d claims passed", ": "};
  static const Labels zh{"第 %d 步（共 %d 步）", "先猜一猜", "你的答案", "答对了", "不对",
                         "运行结果", "运行", "运行时报错", "检查",
                         "%d / %d 条结论通过", "："};
  return lang == Lang::zh ? zh : en;
}

std::string fmt(const char* pattern, int a, int b) {
  char buf[128];
  std::snprintf(buf, sizeof buf, pattern, a, b);
  return buf;
}

bool stdout_tty() { return isatty(STDOUT_FILENO) != 0; }

int terminal_width() {
  winsize w{};
  if (stdout_tty() && ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 40)
    return std::min<int>(w.ws_col, 100);
  return 80;
}

// The lesson folders that did not load, each on its line, exit 2. A folder where nothing loads
// is most likely not a lessons folder at all (--lessons-dir /etc): one line then, not one per
// subfolder.
void report_load_errors(const std::string& dir, const std::vector<lesson::Lesson>& lessons,
                        const std::vector<std::string>& errors) {
  if (errors.empty()) return;
  if (lessons.empty() && errors.size() > 1) {
    std::fprintf(stderr, "furnace: error: %s: none of its %zu folders is a lesson that loads (the first: %s)\n",
                 printable_clipped(dir).c_str(), errors.size(), errors.front().c_str());
    throw ExitCode{2};
  }
  for (const std::string& e : errors) std::fprintf(stderr, "furnace: error: %s\n", e.c_str());
  throw ExitCode{2};
}

std::vector<lesson::Lesson> load_or_exit(const LessonOptions& o) {
  std::vector<std::string> errors;
  const std::string dir = lesson::lessons_dir(o.lessons_dir);
  std::vector<lesson::Lesson> lessons = lesson::load_lessons(dir, &errors);
  report_load_errors(dir, lessons, errors);
  return lessons;
}

std::string lesson_ids(const std::vector<lesson::Lesson>& lessons) {
  std::string known;
  for (const lesson::Lesson& l : lessons) known += (known.empty() ? "" : ", ") + l.id;
  return known;
}

// The lessons, for a command about lesson `id` alone: another folder that does not load is no
// reason to refuse this one. When `id` is not among them, the folder named `id` failing to load is
// the reason (its errors, exit 2); otherwise there is no such lesson, and the line says so even
// when other folders are broken.
std::vector<lesson::Lesson> load_for(const LessonOptions& o, const std::string& id) {
  std::vector<std::string> errors;
  const std::string dir = lesson::lessons_dir(o.lessons_dir);
  std::vector<lesson::Lesson> lessons = lesson::load_lessons(dir, &errors);
  for (const lesson::Lesson& l : lessons)
    if (l.id == id) return lessons;
  std::error_code ec;
  if (!errors.empty() && !id.empty() && std::filesystem::is_directory(std::filesystem::path(dir) / id, ec)) {
    for (const std::string& e : errors) std::fprintf(stderr, "furnace: error: %s\n", e.c_str());
    throw ExitCode{2};
  }
  FURNACE_FAIL() << "no lesson '" << id << "' (lessons: " << lesson_ids(lessons) << ")"
                 << (errors.empty() ? "" : "; lessons that do not load are not listed (`furnace lesson list` says why)");
}

const lesson::Lesson& find_lesson(const std::vector<lesson::Lesson>& lessons, const std::string& id) {
  for (const lesson::Lesson& l : lessons)
    if (l.id == id) return l;
  FURNACE_FAIL() << "no lesson '" << id << "' (lessons: " << lesson_ids(lessons) << ")";
}

void print_checks(const lesson::Step& step, const lesson::StepOutcome& out, Lang lang, bool color) {
  const char* pass = color ? "\x1b[32mPASS\x1b[0m" : "PASS";
  const char* fail = color ? "\x1b[31mFAIL\x1b[0m" : "FAIL";
  for (size_t i = 0; i < out.checks.size(); ++i) {
    const lesson::CheckResult& r = out.checks[i];
    const lesson::Check& c = step.checks[i];
    std::printf("  %s  %s\n", r.pass ? pass : fail, c.claim.in(lang).c_str());
    // On the evidence's one line: a line break in a value (DataParallel's warning starts with one)
    // and the indentation after it become one space, or none right after an opening quote.
    std::string actual;
    bool broken = false;  // inside a line break and its indentation
    for (char ch : r.actual.empty() ? std::string("?") : r.actual) {
      if (ch == '\n') {
        broken = true;
        continue;
      }
      if (broken && (ch == ' ' || ch == '\t')) continue;
      if (broken && !actual.empty() && actual.back() != '"' && actual.back() != ' ') actual += ' ';
      broken = false;
      actual += ch;
    }
    if (actual.size() > 90) {  // a long error was printed in full above
      size_t cut = 80;
      while (cut > 0 && (static_cast<unsigned char>(actual[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
      actual = actual.substr(0, cut) + "...";
    }
    std::string detail = c.observable + " = " + actual;
    const bool compared = std::any_of(c.expectations.begin(), c.expectations.end(),
                                      [](const lesson::Expectation& e) { return e.of.has_value(); });
    if (!r.pass || compared) detail += "; " + r.detail(lang);  // a comparison shows what it compared with
    std::printf("        (%s)\n", detail.c_str());
  }
  if (out.prediction && !out.prediction->among_choices)
    std::printf(lang == Lang::zh ? "  %s  预测的选项里没有真实的答案 %s\n"
                                 : "  %s  the prediction's choices do not include the real answer %s\n",
                fail, out.prediction->shown(lang).c_str());
}

// Asks the prediction on the terminal, under its question: lists the choices (a), b), ...) and
// returns the answer typed (nullopt at end of input). An answer that names no choice, or an empty
// one, is asked again.
std::optional<std::string> ask(const lesson::Prediction& p, Lang lang) {
  for (size_t i = 0; i < p.choices.size(); ++i)
    std::printf("  %s) %s\n", lesson::choice_label(i).c_str(), p.choices[i].c_str());
  for (;;) {
    std::printf("> ");
    std::fflush(stdout);
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    const bool blank = line.find_first_not_of(" \t\r") == std::string::npos;
    if (!blank && (p.choices.empty() || lesson::chosen(p, line))) return line;
    if (p.choices.empty()) continue;
    const std::string last = lesson::choice_label(p.choices.size() - 1);
    std::printf(lang == Lang::zh ? "  请输入字母 a 到 %s，或照抄一个选项\n" : "  type a letter, a to %s, or one of the choices as shown\n",
                last.c_str());
  }
}

void run_lesson(const lesson::Lesson& l, Lang lang, std::optional<int> only_step) {
  const Labels& L = labels(lang);
  const bool color = stdout_tty();
  const bool interactive = isatty(STDIN_FILENO) != 0;
  const int width = terminal_width();
  FURNACE_CHECK(!only_step || (*only_step >= 1 && *only_step <= static_cast<int>(l.steps.size())))
      << "--step " << *only_step << ": lesson " << l.id << " has steps 1.." << l.steps.size();
  lesson::LessonRun run(l);
  int passed = 0, total = 0;
  lesson::Document head;
  lesson::Block title;
  title.kind = lesson::Block::Kind::heading;
  title.level = 1;
  title.spans.push_back({l.title.in(lang), lesson::Span::plain, ""});
  head.blocks.push_back(title);
  if (!only_step) head.blocks.insert(head.blocks.end(), l.intro(lang).blocks.begin(), l.intro(lang).blocks.end());
  std::printf("%s", lesson::render_terminal(head, width, color).c_str());

  for (size_t i = 0; i < l.steps.size(); ++i) {
    if (only_step && static_cast<int>(i) + 1 != *only_step) continue;
    const lesson::Step& step = l.steps[i];
    // A step's title often states what happens ("GPU 2 is called cuda:0"): before a prediction
    // the heading is the step's number alone, and the title heads the text after the run.
    auto heading = [](std::string words, int level) {
      lesson::Block h;
      h.kind = lesson::Block::Kind::heading;
      h.level = level;
      h.spans.push_back({std::move(words), lesson::Span::plain, ""});
      return h;
    };
    const std::string number = fmt(L.step, static_cast<int>(i) + 1, static_cast<int>(l.steps.size()));
    lesson::Document section;
    section.blocks.push_back(heading(step.prediction ? number : number + L.colon + step.title.in(lang), 2));
    std::printf("\n%s", lesson::render_terminal(section, width, color).c_str());
    // The prediction comes first: the step's text explains what happened, answer included.
    std::optional<std::string> answer;
    if (step.prediction) {
      std::printf("%s%s%s\n", L.predict, L.colon, step.prediction->question.in(lang).c_str());
      if (interactive) answer = ask(*step.prediction, lang);
    }
    std::fflush(stdout);
    const lesson::StepOutcome& out = run.run_step(i);
    lesson::Document text;
    if (step.prediction) text.blocks.push_back(heading(step.title.in(lang), 3));
    text.blocks.insert(text.blocks.end(), step.text(lang).blocks.begin(), step.text(lang).blocks.end());
    std::printf("\n%s", lesson::render_terminal(text, width, color).c_str());
    if (step.prediction) {
      std::string verdict;
      if (answer) {
        lesson::Missing why;
        const std::optional<lesson::Value> real = lesson::lookup(step.prediction->observable, out.observables, {}, &why);
        const bool ok = real && lesson::answer_matches(*step.prediction, *real, *answer);
        const bool judged = real && lesson::answer_is_judged(*step.prediction, *real);
        // A choice named by its letter is shown as the choice ("b" -> "b) 4").
        std::string shown = *answer;
        if (const std::optional<size_t> c = lesson::chosen(*step.prediction, *answer))
          shown = lesson::choice_label(*c) + ") " + step.prediction->choices[*c];
        verdict = std::string(L.your) + L.colon + shown +
                  (ok ? std::string(" -> ") + L.right : judged ? std::string(" -> ") + L.wrong : std::string()) + "\n";
      }
      std::printf("\n%s%s%s%s\n", verdict.c_str(), L.answer, L.colon, out.prediction->shown(lang).c_str());
    }
    std::printf("\n%s%s%s\n", L.ran, L.colon, lesson::scenario_summary(step, lang).c_str());
    const std::string& error = out.observables.at("error").string;
    for (const lesson::Value& w : out.observables.at("warnings").items) std::printf("  UserWarning: %s\n", w.string.c_str());
    if (!error.empty()) std::printf("  %s%s%s\n", L.raised, L.colon, error.c_str());
    std::printf("%s%s\n", L.checks, lang == Lang::zh ? "：" : ":");
    print_checks(step, out, lang, color);
    for (const lesson::CheckResult& r : out.checks) passed += r.pass ? 1 : 0;
    total += static_cast<int>(out.checks.size());
    if (out.prediction && !out.prediction->among_choices) ++total;
  }
  std::printf("\n%s\n", fmt(L.summary, passed, total).c_str());
  if (passed != total) throw ExitCode{1};
}

// Runs every step of `l` once; prints one line per language, and the failures.
bool check_lesson(const lesson::Lesson& l, const std::vector<Lang>& langs) {
  lesson::LessonRun run(l);
  int checks = 0;
  double wall = 0;
  bool ok = true;
  for (size_t i = 0; i < l.steps.size(); ++i) {
    const lesson::StepOutcome& out = run.run_step(i);
    checks += static_cast<int>(out.checks.size());
    wall += out.wall_s;
    ok = ok && out.passed;
  }
  for (Lang lang : langs) {
    std::printf(lang == Lang::zh ? "%s  %s [%s]  %zu 步，%d 条检查（%.1f 秒）\n" : "%s  %s [%s]  %zu steps, %d checks  (%.1f s)\n",
                ok ? "PASS" : "FAIL", l.id.c_str(), lesson::lang_name(lang), l.steps.size(), checks, wall);
    if (ok) continue;
    for (size_t i = 0; i < l.steps.size(); ++i) {
      const lesson::StepOutcome& out = run.run_step(i);
      if (out.passed) continue;
      std::printf(lang == Lang::zh ? "  第 %zu 步 '%s'（%s:%d）：\n" : "  step %zu '%s' (%s:%d):\n", i + 1,
                  l.steps[i].id.c_str(), (l.dir + "/lesson.toml").c_str(), l.steps[i].line);
      print_checks(l.steps[i], out, lang, false);
    }
  }
  return ok;
}

}  // namespace

void add_lesson_command(CLI::App& app) {
  auto opts = std::make_shared<LessonOptions>();
  CLI::App* cmd = app.add_subcommand("lesson", "guided lessons: the article step by step, checked against the runtime");
  cmd->require_subcommand(0, 1);
  cmd->add_option("--lessons-dir", opts->lessons_dir,
                  "the lessons folder (default: $FURNACE_LESSONS_DIR, else the source tree's lessons/)");
  cmd->footer(
      "Examples:\n"
      "  furnace lesson list\n"
      "  furnace lesson run 01-single-card --lang zh\n"
      "  furnace lesson run 03-device-mapping --step 2\n"
      "  furnace lesson check --all\n"
      "Format: lessons/FORMAT.md");
  // `furnace lesson run ID --lessons-dir D` as well as `furnace lesson --lessons-dir D run ID`:
  // an option the subcommand does not know falls through to `lesson` (set before the subcommands,
  // which inherit it).
  cmd->fallthrough();
  cmd->callback([cmd] {
    FURNACE_CHECK(!cmd->get_subcommands().empty())
        << "lesson: say 'furnace lesson list', 'furnace lesson run ID' or 'furnace lesson check --all'";
  });

  CLI::App* list = cmd->add_subcommand("list", "list the lessons");
  list->add_option("--lang", opts->lang, "en or zh")->capture_default_str();
  list->callback([opts] {
    const Lang lang = lesson::parse_lang(opts->lang);
    std::vector<std::string> errors;
    std::vector<lesson::Lesson> lessons;
    const std::string dir = lesson::lessons_dir(opts->lessons_dir);
    in_language(lang, [&] { lessons = lesson::load_lessons(dir, &errors); });
    // One table row per lesson (id, title, steps), aligned by display width (a Chinese title is
    // twice as wide as its character count), its summary on the line below.
    std::vector<std::vector<std::string>> rows;
    for (const lesson::Lesson& l : lessons)
      rows.push_back({l.id, l.title.in(lang), std::to_string(l.steps.size()) + (lang == Lang::zh ? " 步" : " steps")});
    const std::string table = format_table(rows, {.right = {false, false, true}, .indent = ""});
    size_t start = 0;
    for (const lesson::Lesson& l : lessons) {
      const size_t end = table.find('\n', start) + 1;
      std::printf("%s    %s\n", table.substr(start, end - start).c_str(), l.summary.in(lang).c_str());
      start = end;
    }
    report_load_errors(dir, lessons, errors);
  });

  CLI::App* run = cmd->add_subcommand("run", "read a lesson: its text, each step's run, prediction and checks");
  run->add_option("id", opts->id, "the lesson (furnace lesson list)")->required();
  run->add_option("--lang", opts->lang, "en or zh")->capture_default_str();
  run->add_option("--step", opts->step, "only this step (1-based)");
  run->callback([opts] {
    const Lang lang = lesson::parse_lang(opts->lang);
    in_language(lang, [&] {
      const std::vector<lesson::Lesson> lessons = load_for(*opts, opts->id);
      run_lesson(find_lesson(lessons, opts->id), lang, opts->step);
    });
  });

  CLI::App* check = cmd->add_subcommand("check", "run every check of one or all lessons, no questions (the tests)");
  check->add_option("id", opts->id, "the lesson (or --all)");
  check->add_flag("--all", opts->all, "every lesson");
  check->add_option("--lang", opts->langs, "en or zh (default: both)");
  check->callback([opts] {
    std::vector<Lang> langs;
    for (const std::string& s : opts->langs) langs.push_back(lesson::parse_lang(s));
    // Errors in the one language asked for (both asked: English).
    in_language(langs.size() == 1 ? langs[0] : Lang::en, [&] {
    FURNACE_CHECK(opts->all != !opts->id.empty()) << "lesson check: give a lesson id or --all (not both)";
    if (langs.empty()) langs = {Lang::en, Lang::zh};
    const std::vector<lesson::Lesson> lessons = opts->all ? load_or_exit(*opts) : load_for(*opts, opts->id);
    bool ok = true;
    if (opts->all) {
      FURNACE_CHECK(!lessons.empty()) << "no lessons in " << lesson::lessons_dir(opts->lessons_dir);
      for (const lesson::Lesson& l : lessons) ok = check_lesson(l, langs) && ok;
    } else {
      ok = check_lesson(find_lesson(lessons, opts->id), langs);
    }
    if (!ok) throw ExitCode{1};
    });
  });
}

}  // namespace furnace::cli
