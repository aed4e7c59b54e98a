// LessonDriver: lessons loaded once, one LessonRun per open lesson, steps run on std::async.
#include "lesson_driver.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace furnace::viz {

LessonDriver::~LessonDriver() { wait(); }

void LessonDriver::load(const std::string& dir) {
  wait();
  view_ = LessonView{};
  run_.reset();
  std::vector<std::string> errors;
  try {
    view_.lessons = std::make_shared<const std::vector<lesson::Lesson>>(
        lesson::load_lessons(lesson::lessons_dir(dir), &errors));
  } catch (const std::exception& e) {
    view_.lessons = std::make_shared<const std::vector<lesson::Lesson>>();
    errors.push_back(e.what());
  }
  view_.load_errors = std::move(errors);
}

int LessonDriver::find(const std::string& id) const {
  if (!view_.lessons) return -1;
  for (size_t i = 0; i < view_.lessons->size(); ++i)
    if ((*view_.lessons)[i].id == id) return static_cast<int>(i);
  return -1;
}

void LessonDriver::open(int index) {
  wait();
  run_.reset();
  view_.outcomes.reset();
  view_.run_error.clear();
  view_.step = 0;
  view_.lesson = view_.lessons && index >= 0 && index < static_cast<int>(view_.lessons->size())
                     ? index : -1;
  if (const lesson::Lesson* l = view_.open_lesson()) run_ = std::make_unique<lesson::LessonRun>(*l);
}

void LessonDriver::go_to(int step) {
  const lesson::Lesson* l = view_.open_lesson();
  if (!l || l->steps.empty()) return;
  view_.step = std::clamp(step, 0, static_cast<int>(l->steps.size()) - 1);
}

void LessonDriver::run_current() {
  if (view_.running || !run_ || !view_.current_step()) return;
  view_.running = true;
  view_.run_error.clear();
  const size_t index = static_cast<size_t>(view_.step);
  lesson::LessonRun* run = run_.get();
  // The step may first run the earlier steps its checks refer to; all of them come back.
  pending_ = std::async(std::launch::async, [run, index] {
    run->run_step(index);
    std::map<size_t, lesson::StepOutcome> done;
    for (size_t i = 0; i < run->lesson().steps.size(); ++i)
      if (run->has_run(i)) done.emplace(i, run->run_step(i));  // cached: no second run
    return done;
  });
}

bool LessonDriver::poll() {
  if (!view_.running || !pending_.valid()) return false;
  if (pending_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  try {
    view_.outcomes = std::make_shared<const std::map<size_t, lesson::StepOutcome>>(pending_.get());
  } catch (const std::exception& e) {
    view_.run_error = e.what();
  }
  view_.running = false;
  return true;
}

std::string LessonDriver::all_text(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string text;
  std::error_code ec;
  const fs::path root = lesson::lessons_dir(dir);
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (!it->is_regular_file(ec) || (p.extension() != ".md" && p.extension() != ".toml")) continue;
    std::ifstream in(p, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return text;
}

namespace {

const lesson::Value* observable(const lesson::Observables& obs, const char* name) {
  auto it = obs.find(name);
  return it == obs.end() ? nullptr : &it->second;
}

int64_t int_of(const lesson::Observables& obs, const char* name, int64_t fallback = 0) {
  const lesson::Value* v = observable(obs, name);
  return v && v->type == lesson::Value::Type::number ? static_cast<int64_t>(v->number) : fallback;
}

// The items of an array observable; empty when it is absent (an action that failed early).
const std::vector<lesson::Value>& items_of(const lesson::Observables& obs, const char* name) {
  static const std::vector<lesson::Value> kNone;
  const lesson::Value* v = observable(obs, name);
  return v && v->type == lesson::Value::Type::array ? v->items : kNone;
}

int64_t item_int(const std::vector<lesson::Value>& items, size_t i) {
  return i < items.size() ? static_cast<int64_t>(items[i].number) : 0;
}

}  // namespace

std::optional<StepMemory> step_memory(const lesson::Step& step, const lesson::StepOutcome& outcome) {
  if (step.action != "memory" && step.action != "machine") return std::nullopt;
  const lesson::Observables& obs = outcome.observables;
  StepMemory m;
  m.step_id = step.id;
  m.action = step.action;
  if (const lesson::Value* e = observable(obs, "error")) m.error = e->string;
  if (step.action == "memory") {
    const std::vector<lesson::Value>& notes = items_of(obs, "notes");
    const std::vector<lesson::Value>& allocated = items_of(obs, "allocated_steps");
    const std::vector<lesson::Value>& reserved = items_of(obs, "reserved_steps");
    for (size_t i = 0; i < notes.size(); ++i)
      m.operations.push_back({notes[i].string, item_int(allocated, i), item_int(reserved, i)});
    m.context = int_of(obs, "context");
    m.smi_used = int_of(obs, "smi_used", m.context + m.reserved());  // absent after an error
  } else {
    const std::vector<lesson::Value>& used = items_of(obs, "smi_used");
    const std::vector<lesson::Value>& context = items_of(obs, "smi_context");
    const std::vector<lesson::Value>& processes = items_of(obs, "smi_process_count");
    for (size_t i = 0; i < used.size(); ++i)
      m.gpus.push_back({static_cast<int>(i), item_int(used, i), item_int(context, i),
                        static_cast<int>(item_int(processes, i))});
  }
  return m;
}

std::optional<StepMemory> current_step_memory(const LessonView& view) {
  const lesson::Step* step = view.current_step();
  const lesson::StepOutcome* outcome = step ? view.outcome(static_cast<size_t>(view.step)) : nullptr;
  return outcome ? step_memory(*step, *outcome) : std::nullopt;
}

void LessonDriver::wait() {
  if (pending_.valid()) pending_.wait();
  poll();
}

}  // namespace furnace::viz
