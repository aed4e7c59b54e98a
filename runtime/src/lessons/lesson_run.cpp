// lesson_run.cpp: following a lesson step by step (LessonRun): a step's action runs once, after
// the earlier steps its checks refer to ("STEP.NAME"), and its checks and prediction are evaluated
// against what the runtime produced.
#include <chrono>
#include <set>

#include "furnace/lesson.h"  // defines: LessonRun, run_action, evaluate_check

namespace furnace::lesson {
namespace {

// The earlier steps whose observables a step's checks name.
std::set<size_t> dependencies(const Lesson& lesson, const Step& step) {
  std::set<size_t> out;
  auto add = [&](const std::string& ref) {
    const size_t dot = ref.find('.');
    if (dot == std::string::npos) return;
    const int i = lesson.step_index(ref.substr(0, dot));
    if (i >= 0) out.insert(static_cast<size_t>(i));
  };
  for (const Check& c : step.checks) {
    add(c.observable);
    for (const Expectation& e : c.expectations)
      if (e.of) add(*e.of);
  }
  return out;
}

}  // namespace

LessonRun::LessonRun(const Lesson& lesson, TraceBus* trace) : lesson_(lesson), trace_(trace) {}

bool LessonRun::has_run(size_t index) const { return done_.count(index) > 0; }

void LessonRun::reset() { done_.clear(); }

const StepOutcome& LessonRun::run_step(size_t index) {
  if (const auto it = done_.find(index); it != done_.end()) return it->second;
  const Step& step = lesson_.steps.at(index);
  std::map<std::string, Observables> earlier;
  for (size_t d : dependencies(lesson_, step)) earlier[lesson_.steps[d].id] = run_step(d).observables;

  StepOutcome out;
  const auto t0 = std::chrono::steady_clock::now();
  out.observables = run_action(step, trace_);
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.passed = true;
  for (const Check& c : step.checks) {
    out.checks.push_back(evaluate_check(c, out.observables, earlier));
    out.passed = out.passed && out.checks.back().pass;
  }
  if (step.prediction) {
    out.prediction = prediction_answer(*step.prediction, out.observables);
    out.passed = out.passed && out.prediction->among_choices;
  }
  return done_.emplace(index, std::move(out)).first->second;
}

}  // namespace furnace::lesson
