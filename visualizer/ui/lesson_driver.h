// LessonDriver: the lessons as the visualizer follows them. It loads the lesson folders once,
// keeps the open lesson and step, and runs a step's action and checks (lesson::LessonRun) on a
// thread of its own, so the UI thread never waits on them; the Controller carries out the Lesson
// panel's requests through it and publishes its view in the Snapshot.
#pragma once

#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "furnace/lesson.h"  // defines: Lesson, LessonRun, StepOutcome

namespace furnace::viz {

// What the Lesson panel reads (a copy in the Snapshot; the lessons themselves are shared).
struct LessonView {
  std::shared_ptr<const std::vector<lesson::Lesson>> lessons;  // by `order`; null: not loaded
  std::vector<std::string> load_errors;  // folders that failed to load: "<file>:<line>: ..."
  int lesson = -1;                       // the open lesson; -1: the list
  int step = 0;                          // its current step
  bool running = false;                  // the step's action and checks are running
  // Results of the open lesson's steps that have run, by step index.
  std::shared_ptr<const std::map<size_t, lesson::StepOutcome>> outcomes;
  std::string run_error;                 // an action that threw (a defect, not a lesson result)

  const lesson::Lesson* open_lesson() const {
    return lessons && lesson >= 0 && lesson < static_cast<int>(lessons->size())
               ? &(*lessons)[static_cast<size_t>(lesson)] : nullptr;
  }
  const lesson::Step* current_step() const {
    const lesson::Lesson* l = open_lesson();
    return l && step >= 0 && step < static_cast<int>(l->steps.size())
               ? &l->steps[static_cast<size_t>(step)] : nullptr;
  }
  const lesson::StepOutcome* outcome(size_t index) const {
    if (!outcomes) return nullptr;
    auto it = outcomes->find(index);
    return it == outcomes->end() ? nullptr : &it->second;
  }
};

class LessonDriver {
 public:
  LessonDriver() = default;
  ~LessonDriver();  // waits for a running step
  LessonDriver(const LessonDriver&) = delete;
  LessonDriver& operator=(const LessonDriver&) = delete;

  // Loads every lesson under `dir` (lesson::lessons_dir() when empty). Folders that fail are
  // listed in view().load_errors; a missing folder leaves the list empty with one error.
  void load(const std::string& dir = "");
  // Opens lesson `index` (-1: back to the list) at its first step; forgets earlier results.
  void open(int index);
  int find(const std::string& id) const;  // index of the lesson with that id, or -1
  void go_to(int step);                   // clamped to the lesson's steps
  // Starts the current step's action and checks on the lesson thread (no-op while one runs).
  void run_current();
  // Once a frame: collects a finished run. Returns true when the view changed.
  bool poll();
  // Blocks until a running step has finished (tests, screenshots).
  void wait();
  // The raw text of every lesson file under `dir` (lessons_dir() when empty): the characters
  // the font atlas must hold. Unreadable files are skipped.
  static std::string all_text(const std::string& dir = "");

  const LessonView& view() const { return view_; }

 private:
  LessonView view_;
  std::unique_ptr<lesson::LessonRun> run_;  // of the open lesson; used by one thread at a time
  std::future<std::map<size_t, lesson::StepOutcome>> pending_;
};

}  // namespace furnace::viz
