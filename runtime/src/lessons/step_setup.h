// lessons/step_setup.h (private): reading a step's [step.scenario] table into the StepSetup of its
// action (furnace/lesson.h), with every key declared once in step_setup.cpp's table: its name, how
// it is read and checked, and how scenario_summary says it.
#pragma once

#include "furnace/lesson.h"     // defines: StepSetup, ActionInfo
#include "lessons/toml_fields.h"  // defines: Fields

namespace furnace::lesson::detail {

// The setup `action` runs with the lesson defaults of FORMAT.md and the keys of `f` (nullptr: the
// step has no [step.scenario]). Every problem fails on `f` with the key's line.
StepSetup read_setup(const Fields* f, const ActionInfo& action);

}  // namespace furnace::lesson::detail
