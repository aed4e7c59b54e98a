// The line at the top of the live panels (Step flow, Memory, Training, Timeline) that says what
// they show: a lesson step's own run (held after its steps), a run that has not started yet and
// why, the dataset still loading, or an ordinary live run (no line). Panels never show a run
// without saying whose it is when a lesson step is open beside them.
#pragma once

#include "app_state.h"  // defines: AppState
#include "snapshot.h"   // defines: Snapshot

namespace furnace::viz {

// Draws the banner (wrapped to the window) when there is something to say; returns true when
// the panel has no run to show (nothing has reached a device yet), so it can stop there.
bool draw_run_banner(const AppState& app, const Snapshot& snap);

}  // namespace furnace::viz
