// libFuzzer target for the trace files furnace-viz opens (`--trace-file`, a file dropped on the
// window): parse_chrome_trace in visualizer/ui/trace_file.cpp, Chrome's JSON trace format as
// `furnace train --trace` writes it or as other tools do. Every input gives a timeline the panel can
// draw (tracks in order, events sorted, finite times, non-negative durations) or one clear line.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "trace_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace furnace;
  using fuzz::require;
  const std::string text(reinterpret_cast<const char*>(data), size);
  viz::TimelineData t;
  if (!fuzz::accepts([&] { t = viz::parse_chrome_trace(text, "fuzz.json"); })) return 0;
  require(!t.tracks.empty(), "an accepted trace has a track");
  require(std::isfinite(t.t_min) && std::isfinite(t.t_max) && t.t_min <= t.t_max, "a finite time range");
  for (size_t i = 0; i < t.tracks.size(); ++i) {
    const viz::TimelineTrack& k = t.tracks[i];
    if (i > 0)
      require(std::pair(t.tracks[i - 1].device, t.tracks[i - 1].stream) < std::pair(k.device, k.stream),
              "tracks in (device, stream) order, each once");
    require(!k.label.empty(), "a labelled track");
    for (size_t j = 0; j < k.events.size(); ++j) {
      const viz::TimelineEvent& e = k.events[j];
      require(std::isfinite(e.start) && std::isfinite(e.dur) && e.dur >= 0, "finite start, duration >= 0");
      require(e.start >= t.t_min && e.start + e.dur <= t.t_max, "inside the time range");
      require(e.name != nullptr && e.flops >= 0, "a name");
      if (j > 0) require(k.events[j - 1].start <= e.start, "events sorted by start");
    }
  }
  return 0;
}
