// LessonDriver: the lessons as the visualizer follows them. It loads the lesson folders once,
// keeps the open lesson and step, and runs a step's action and checks (lesson::LessonRun) on a
// thread of its own, so the UI thread never waits on them; the Controller carries out the Lesson
// panel's requests through it and publishes its view in the Snapshot. Also here: StepMemory, a
// memory step's results as the Memory panel draws them.
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
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
  // The current step asks a prediction and has not run yet: the panels must not show the answer.
  bool awaiting_answer() const {
    const lesson::Step* s = current_step();
    return s && s->prediction && !running && !outcome(static_cast<size_t>(step));
  }
  const lesson::StepOutcome* outcome(size_t index) const {
    if (!outcomes) return nullptr;
    auto it = outcomes->find(index);
    return it == outcomes->end() ? nullptr : &it->second;
  }
};

// What a lesson step about memory produced, read from its outcome's observables for the Memory
// panel (the live run shows something else). Action "memory": the caching allocator replayed on
// one GPU, one row per operation. Action "machine": nvidia-smi per GPU at the end of the story
// (its observables carry no per-process allocated or reserved, so neither does this). Bytes.
struct StepMemory {
  struct Operation {
    std::string note;  // "alloc[0]: ...", as the runtime describes it
    int64_t allocated = 0, reserved = 0;  // memory_allocated / memory_reserved after it
  };
  struct Gpu {
    int index = 0;       // nvidia-smi's GPU number
    int64_t used = 0;    // what nvidia-smi shows: contexts plus the processes' reserved memory
    int64_t context = 0; // the CUDA contexts on it
    int processes = 0;
  };
  std::string step_id;
  std::string action;               // "memory" | "machine"
  std::vector<Operation> operations;  // memory, in order (up to the error, if one stopped it)
  int64_t context = 0;              // memory: the process's CUDA context
  int64_t smi_used = 0;             // memory: context + reserved after the last operation
  std::vector<Gpu> gpus;            // machine
  std::string error;                // the action's error ("CUDA out of memory. ..."), or empty

  int64_t reserved() const { return operations.empty() ? 0 : operations.back().reserved; }
  int64_t allocated() const { return operations.empty() ? 0 : operations.back().allocated; }
};

// The memory figures of `step` (action "memory" or "machine") from its outcome; nullopt for other
// actions.
std::optional<StepMemory> step_memory(const lesson::Step& step, const lesson::StepOutcome& outcome);
// The same for the open lesson's current step, once it has run.
std::optional<StepMemory> current_step_memory(const LessonView& view);

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
