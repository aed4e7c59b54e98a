// The UI tests' frame loop: Controller::update as furnace-viz calls it once a frame, until a
// condition on the snapshot holds or time runs out.
#pragma once

#include <chrono>
#include <thread>

#include "controller.h"

namespace furnace::viz {

// Runs the controller's frame loop until `done` or `seconds` pass.
template <class Pred>
bool frames_until(Controller& c, AppState& app, Pred done, double seconds = 60) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    c.update(app, t);
    if (done(c.snapshot())) return true;
    if (t > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace furnace::viz
