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

void LessonDriver::wait() {
  if (pending_.valid()) pending_.wait();
  poll();
}

}  // namespace furnace::viz
