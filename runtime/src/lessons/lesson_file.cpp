// lesson_file.cpp: reads a lesson folder (lesson.toml, en.md, zh.md; lessons/FORMAT.md) into a
// Lesson and validates everything that can be checked before running: every key known and of the
// right type, each step's [step.scenario] (read by step_setup.cpp), every observable a check, a
// reference or a prediction names produced by the action (or an earlier step's), and a text
// section per step in both languages. Every problem is one furnace::Error line
// "<file>:<line>:<column>: <problem>". Not here: the DataLoader (data/loader.cpp).
//
// [SECTION] observable references  [SECTION] checks and predictions  [SECTION] text
// [SECTION] lesson.toml  [SECTION] folders
#include <toml++/toml.h>  // defines: toml::parse, toml::table, toml::node, toml::parse_error

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "furnace/error.h"              // defines: FURNACE_FAIL, Error
#include "furnace/file_kind.h"  // defines: is_special_file, too_big_to_read
#include "furnace/lesson.h"             // defines: Lesson, load_lesson, load_lessons
#include "furnace/toml_reader.h"         // defines: toml_ascii, toml_type_name
#include "lessons/lesson_names.h"       // defines: names::is_slug, parse_ref, parse_step_heading
#include "lessons/step_setup.h"         // defines: read_setup
#include "lessons/toml_fields.h"        // defines: Fields, suggestion

#ifndef FURNACE_DEFAULT_LESSONS_DIR
#define FURNACE_DEFAULT_LESSONS_DIR "lessons"  // CMake passes the source tree's
#endif

namespace furnace::lesson {
namespace {

namespace fs = std::filesystem;
using detail::Fields;
using detail::suggestion;

// ---- [SECTION] observable references ------------------------------------------------------------

struct RefInfo {
  ObservableInfo observable;
  bool element = false;  // NAME[i]
};
Value::Type effective_type(const RefInfo& r) { return r.element ? r.observable.item_type : r.observable.type; }

const ObservableInfo* find_observable(const ActionInfo& action, const std::string& name) {
  static const ObservableInfo error{"error", Value::Type::string};
  static const ObservableInfo warnings{"warnings", Value::Type::array, Value::Type::string};
  if (name == "error") return &error;
  if (name == "warnings") return &warnings;
  for (const ObservableInfo& o : action.observables)
    if (o.name == name) return &o;
  return nullptr;
}

// Resolves "NAME", "NAME[i]", "STEP.NAME[i]" for step `index` of `steps`; fails with the line.
RefInfo resolve_ref(const std::string& ref, const std::vector<Step>& steps, size_t index, bool allow_other_step,
                    const Fields& f, const toml::node* where) {
  const std::optional<names::Ref> m = names::parse_ref(ref);
  if (!m)
    f.fail(where, "'" + printable(ref) + "' is not an observable name (NAME, NAME[i] or STEP.NAME)");
  const ActionInfo* action = find_action(steps[index].action);
  if (m->step) {
    if (!allow_other_step) f.fail(where, "a prediction is about its own step: '" + ref + "' names another step");
    const std::string& step_id = *m->step;
    const auto it = std::find_if(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(index),
                                 [&](const Step& s) { return s.id == step_id; });
    if (it == steps.begin() + static_cast<std::ptrdiff_t>(index)) {
      const bool exists = std::any_of(steps.begin(), steps.end(), [&](const Step& s) { return s.id == step_id; });
      f.fail(where, "'" + ref + "': " + (exists ? "step '" + step_id + "' is not an earlier step" : "no step '" + step_id + "' in this lesson"));
    }
    action = find_action(it->action);
  }
  const std::string& name = m->name;
  const ObservableInfo* o = find_observable(*action, name);
  if (!o) {
    std::vector<std::string> names{"error", "warnings"};
    for (const ObservableInfo& x : action->observables) names.push_back(x.name);
    std::string all;
    for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
    const std::string hint = suggestion(name, names);
    f.fail(where, "unknown observable '" + name + "' (action '" + action->name + "' produces: " + all + ")" +
                      (hint.rfind("did", 0) == 0 ? "; " + hint : ""));
  }
  if (m->indexed && o->type != Value::Type::array)
    f.fail(where, "'" + ref + "': '" + name + "' is not an array, it cannot be indexed");
  return {*o, m->indexed};
}

// ---- [SECTION] checks and predictions -----------------------------------------------------------

Value literal_value(const toml::node& n, const Fields& f, const std::string& key) {
  if (n.is_integer()) return Value::of_int(*n.value<int64_t>());
  if (n.is_floating_point()) return Value::of_number(*n.value<double>());
  if (n.is_boolean()) return Value::of_bool(*n.value<bool>());
  if (n.is_string()) return Value::of_string(std::string(*n.value<std::string_view>()));
  if (n.is_array()) {
    std::vector<Value> items;
    for (const toml::node& item : *n.as_array()) items.push_back(literal_value(item, f, key));
    return Value::of_array(std::move(items));
  }
  f.fail(&n, "'" + key + "' must be a value or { of = \"OBSERVABLE\", times = k }, got " + toml_type_name(n));
}

const std::vector<std::pair<std::string, Expectation::Op>>& expectation_keys() {
  static const std::vector<std::pair<std::string, Expectation::Op>> keys = {
      {"equals", Expectation::Op::equals},       {"not_equals", Expectation::Op::not_equals},
      {"less_than", Expectation::Op::less_than}, {"greater_than", Expectation::Op::greater_than},
      {"at_most", Expectation::Op::at_most},     {"at_least", Expectation::Op::at_least},
      {"approx", Expectation::Op::approx},       {"contains", Expectation::Op::contains},
      {"not_contains", Expectation::Op::not_contains}};
  return keys;
}

bool numeric(Expectation::Op op) {
  return op == Expectation::Op::less_than || op == Expectation::Op::greater_than ||
         op == Expectation::Op::at_most || op == Expectation::Op::at_least || op == Expectation::Op::approx;
}

Check read_check(const Fields& f, const std::vector<Step>& steps, size_t index) {
  std::vector<std::string> allowed{"observable", "claim", "rel_tol", "abs_tol"};
  for (const auto& [k, op] : expectation_keys()) allowed.push_back(k);
  f.only(allowed, "[[step.check]]");
  Check c;
  c.line = f.line();
  c.observable = f.string("observable");
  const RefInfo target = resolve_ref(c.observable, steps, index, true, f, f.find("observable"));
  c.claim = f.text("claim");
  if (const toml::node* n = f.find("rel_tol")) c.rel_tol = f.number_of(*n, "rel_tol");
  if (const toml::node* n = f.find("abs_tol")) c.abs_tol = f.number_of(*n, "abs_tol");
  const Value::Type t = effective_type(target);
  const bool numbers = t == Value::Type::number ||
                       (t == Value::Type::array && !target.element && target.observable.item_type == Value::Type::number);
  for (const auto& [key, op] : expectation_keys()) {
    const toml::node* n = f.find(key);
    if (!n) continue;
    Expectation e;
    e.op = op;
    if (numeric(op) && !numbers)
      f.fail(n, "'" + key + "' compares numbers, but '" + c.observable + "' is not a number");
    if ((op == Expectation::Op::contains || op == Expectation::Op::not_contains) && t != Value::Type::string &&
        t != Value::Type::array)
      f.fail(n, "'" + key + "' needs a string or an array, but '" + c.observable + "' is neither");
    if (n->is_table()) {
      Fields ref(*n->as_table(), f.origin(), f.what() + ": " + key);
      ref.only({"of", "times"}, ("'" + key + "'").c_str());
      e.of = ref.string("of");
      const RefInfo other = resolve_ref(*e.of, steps, index, true, ref, ref.find("of"));
      if (const toml::node* times = ref.find("times")) e.times = ref.number_of(*times, "times");
      if (e.times != 1 && effective_type(other) != Value::Type::number)
        ref.fail(ref.find("times"), "'times' needs a number, but '" + *e.of + "' is not one");
      if (numeric(op) && op != Expectation::Op::approx && effective_type(other) != Value::Type::number)
        ref.fail(ref.find("of"), "'" + *e.of + "' is not a number");
    } else {
      e.literal = literal_value(*n, f, key);
      if (numeric(op) && op != Expectation::Op::approx && e.literal.type != Value::Type::number)
        f.fail(n, "'" + key + "' needs a number");
      if (op == Expectation::Op::approx && e.literal.type != Value::Type::number && e.literal.type != Value::Type::array)
        f.fail(n, "'approx' needs a number or an array of numbers");
    }
    c.expectations.push_back(std::move(e));
  }
  if (c.expectations.empty())
    f.fail(nullptr, "no expectation: give one or more of equals, not_equals, less_than, greater_than, at_most, "
                    "at_least, approx, contains, not_contains");
  return c;
}

Prediction read_prediction(const Fields& f, const std::vector<Step>& steps, size_t index) {
  f.only({"question", "observable", "choices"}, "[step.prediction]");
  Prediction p;
  p.line = f.line();
  p.question = f.text("question");
  p.observable = f.string("observable");
  resolve_ref(p.observable, steps, index, false, f, f.find("observable"));
  if (const toml::node* n = f.find("choices")) {
    p.choices = f.strings_of(*n, "choices");
    if (p.choices.size() < 2) f.fail(n, "'choices' needs at least two choices");
    if (p.choices.size() > 26) f.fail(n, "'choices' has more than 26 choices (the terminal labels them a to z)");
  }
  return p;
}

// ---- [SECTION] text -----------------------------------------------------------------------------

std::string read_file(const fs::path& p) {
  FURNACE_CHECK(!is_special_file(p)) << p.string() << ": not a regular file";
  const std::string too_big = too_big_to_read(p, 4u << 20);  // a lesson's text is tens of KiB
  FURNACE_CHECK(too_big.empty()) << p.string() << ": " << too_big;
  std::ifstream in(p, std::ios::binary);
  FURNACE_CHECK(in) << p.string() << ": cannot open";
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Splits a language's document into the introduction and one section per step.
void attach_text(Lesson& lesson, Lang lang, const fs::path& file) {
  FURNACE_CHECK(fs::exists(file)) << file.string() << ": missing: a lesson has its text in en.md and zh.md";
  const std::string origin = file.string();
  const Document doc = parse_markdown(read_file(file), origin);
  Document* into = lang == Lang::zh ? &lesson.intro_zh : &lesson.intro_en;
  std::vector<bool> seen(lesson.steps.size(), false);
  std::vector<int> heading_line(lesson.steps.size(), 0);
  size_t next = 0;  // sections come in step order
  bool title_allowed = true;
  for (const Block& b : doc.blocks) {
    if (b.kind == Block::Kind::heading && b.level == 1) {
      FURNACE_CHECK(title_allowed && b.quote_depth == 0)
          << origin << ":" << b.line << ": a '# ' title may only open the file (steps use '## Title {#step-id}')";
      title_allowed = false;
      continue;
    }
    title_allowed = false;
    if (b.kind != Block::Kind::heading || b.level != 2) {
      into->blocks.push_back(b);
      continue;
    }
    const std::string text = spans_text(b.spans);
    const std::optional<names::StepHeading> m = names::parse_step_heading(text);
    FURNACE_CHECK(m.has_value())
        << origin << ":" << b.line << ": '## " << printable(text) << "' has no step id: write '## Title {#step-id}'";
    const int i = lesson.step_index(m->id);
    FURNACE_CHECK(i >= 0) << origin << ":" << b.line << ": no step '" << m->id << "' in lesson.toml";
    FURNACE_CHECK(!seen[static_cast<size_t>(i)])
        << origin << ":" << b.line << ": a second section for step '" << m->id << "'";
    FURNACE_CHECK(static_cast<size_t>(i) == next)
        << origin << ":" << b.line << ": step '" << m->id << "' comes before step '" << lesson.steps[next].id
        << "': the sections follow the order of the steps in lesson.toml";
    seen[static_cast<size_t>(i)] = true;
    heading_line[static_cast<size_t>(i)] = b.line;
    ++next;
    Step& step = lesson.steps[static_cast<size_t>(i)];
    (lang == Lang::zh ? step.title.zh : step.title.en) = m->title;
    FURNACE_CHECK(!m->title.empty()) << origin << ":" << b.line << ": the heading of step '" << step.id << "' has no title";
    into = lang == Lang::zh ? &step.text_zh : &step.text_en;
    into->blocks.clear();
  }
  for (size_t i = 0; i < lesson.steps.size(); ++i) {
    const Step& s = lesson.steps[i];
    FURNACE_CHECK(seen[i]) << origin << ": no section for step '" << s.id << "' of lesson.toml:" << s.line
                           << " (write '## Title {#" << s.id << "}')";
    FURNACE_CHECK(!s.text(lang).blocks.empty())
        << origin << ":" << heading_line[i] << ": the section of step '" << s.id << "' has no text";
  }
}

// ---- [SECTION] lesson.toml ----------------------------------------------------------------------

Lesson read_lesson_toml(const fs::path& folder) {
  const fs::path file = folder / "lesson.toml";
  const std::string origin = file.string();
  FURNACE_CHECK(fs::exists(file)) << origin << ": missing: every lesson folder has a lesson.toml";
  toml::table root;
  try {
    // toml_ascii: the same document in ASCII, which Debian's toml++ 3.3.0 parses without undefined
    // behaviour on characters such as "。" (furnace/toml_reader.h).
    root = toml::parse(toml_ascii(read_file(file), origin), origin);
  } catch (const toml::parse_error& e) {
    FURNACE_FAIL() << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": "
                   << printable(e.description());
  }
  Fields top(root, origin, "");
  top.only({"id", "order", "title", "summary", "article_section", "pitfalls", "step"}, "lesson.toml");
  Lesson l;
  l.dir = folder.string();
  l.id = top.string("id");
  const std::string folder_name = folder.filename().string();
  if (l.id != folder_name) top.fail(top.find("id"), "id '" + printable(l.id) + "' must equal the folder name '" + printable(folder_name) + "'");
  if (!names::is_lesson_id(l.id)) top.fail(top.find("id"), "id '" + printable(l.id) + "' must look like NN-slug (01-single-card)");
  l.order = static_cast<int>(top.integer("order"));
  l.title = top.text("title");
  l.summary = top.text("summary");
  l.article_section = top.string("article_section");
  for (int64_t p : top.integers_of(top.need("pitfalls"), "pitfalls")) {
    if (p < 1 || p > 17) top.fail(top.find("pitfalls"), "pitfall " + std::to_string(p) + " is not in 1..17 (pitfalls.md)");
    l.pitfalls.push_back(static_cast<int>(p));
  }
  const toml::node& steps = top.need("step");
  if (!steps.is_array_of_tables() || steps.as_array()->empty())
    top.fail(&steps, "'step' must be one or more [[step]] tables");

  for (const toml::node& node : *steps.as_array()) {
    const size_t index = l.steps.size();
    Fields f(*node.as_table(), origin, "step " + std::to_string(index + 1));
    f.only({"id", "panel", "action", "scenario", "prediction", "check"}, "[[step]]");
    Step s;
    s.line = f.line();
    s.id = f.string("id");
    if (!names::is_slug(s.id)) f.fail(f.find("id"), "step id '" + printable(s.id) + "' must be lower-case words joined by '-'");
    if (l.find_step(s.id)) f.fail(f.find("id"), "a second step with id '" + s.id + "'");
    Fields sf(*node.as_table(), origin, "step '" + s.id + "'");
    s.panel = sf.string("panel");
    if (std::find(panels().begin(), panels().end(), s.panel) == panels().end())
      sf.fail(sf.find("panel"), "unknown panel '" + printable(s.panel) + "' (" + suggestion(s.panel, panels()) + ")");
    s.action = sf.string("action");
    const ActionInfo* action = find_action(s.action);
    if (!action) {
      std::vector<std::string> names;
      for (const ActionInfo& a : actions()) names.push_back(a.name);
      sf.fail(sf.find("action"), "unknown action '" + printable(s.action) + "' (" + suggestion(s.action, names) + ")");
    }
    const toml::node* scenario = sf.find("scenario");
    if (scenario && !scenario->is_table()) sf.fail(scenario, "'scenario' must be a table, got " + toml_type_name(*scenario));
    if (scenario) {
      Fields scf(*scenario->as_table(), origin, "step '" + s.id + "': scenario");
      s.setup = detail::read_setup(&scf, *action);
    } else {
      s.setup = detail::read_setup(nullptr, *action);
    }
    l.steps.push_back(std::move(s));  // checks may refer to it by id from now on

    Step& step = l.steps.back();
    if (const toml::node* p = sf.find("prediction")) {
      if (!p->is_table()) sf.fail(p, "'prediction' must be a table [step.prediction]");
      step.prediction = read_prediction(Fields(*p->as_table(), origin, "step '" + step.id + "': prediction"), l.steps, index);
    }
    const toml::node* checks = sf.find("check");
    if (!checks) sf.fail(nullptr, "no [[step.check]]: every step checks the claims its text makes");
    if (!checks->is_array_of_tables() || checks->as_array()->empty())
      sf.fail(checks, "'check' must be one or more [[step.check]] tables");
    int k = 0;
    for (const toml::node& c : *checks->as_array()) {
      ++k;
      l.steps.back().checks.push_back(
          read_check(Fields(*c.as_table(), origin, "step '" + step.id + "': check " + std::to_string(k)), l.steps, index));
    }
  }
  if (std::none_of(l.steps.begin(), l.steps.end(), [](const Step& s) { return s.prediction.has_value(); }))
    top.fail(&steps, "no step has a [step.prediction]: a lesson asks the learner at least once");
  return l;
}

}  // namespace

// ---- [SECTION] folders --------------------------------------------------------------------------

const char* lang_name(Lang lang) { return lang == Lang::zh ? "zh" : "en"; }

Lang parse_lang(std::string_view text) {
  if (text == "en") return Lang::en;
  if (text == "zh") return Lang::zh;
  FURNACE_FAIL() << "--lang must be en or zh (got '" << printable(text) << "')";
}

const Step* Lesson::find_step(std::string_view id) const {
  const int i = step_index(id);
  return i < 0 ? nullptr : &steps[static_cast<size_t>(i)];
}

int Lesson::step_index(std::string_view id) const {
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].id == id) return static_cast<int>(i);
  return -1;
}

std::string lessons_dir(const std::string& override_dir) {
  if (!override_dir.empty()) return override_dir;
  if (const char* d = std::getenv("FURNACE_LESSONS_DIR"); d && *d) return d;
  return FURNACE_DEFAULT_LESSONS_DIR;
}

Lesson load_lesson(const std::string& folder) {
  const fs::path dir(folder);
  FURNACE_CHECK(fs::is_directory(dir)) << folder << ": not a lesson folder (no such directory)";
  Lesson l = read_lesson_toml(dir);
  attach_text(l, Lang::en, dir / "en.md");
  attach_text(l, Lang::zh, dir / "zh.md");
  return l;
}

std::vector<Lesson> load_lessons(const std::string& dir, std::vector<std::string>* errors) {
  FURNACE_CHECK(fs::is_directory(dir)) << dir << ": the lessons folder does not exist (set FURNACE_LESSONS_DIR or --lessons-dir)";
  std::vector<fs::path> folders;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.is_directory()) folders.push_back(e.path());
  std::sort(folders.begin(), folders.end());
  std::vector<Lesson> out;
  auto problem = [&](const std::string& line) {
    if (!errors) {
      FURNACE_FAIL() << line;
    }
    errors->push_back(line);
  };
  for (const fs::path& f : folders) {
    try {
      Lesson l = load_lesson(f.string());
      const auto same = std::find_if(out.begin(), out.end(), [&](const Lesson& o) { return o.order == l.order; });
      if (same != out.end()) {
        problem((f / "lesson.toml").string() + ": order " + std::to_string(l.order) + " is also the order of " + same->id);
        continue;
      }
      out.push_back(std::move(l));
    } catch (const Error& e) {
      problem(e.what());
    }
  }
  std::sort(out.begin(), out.end(), [](const Lesson& a, const Lesson& b) { return a.order < b.order; });
  return out;
}

}  // namespace furnace::lesson
