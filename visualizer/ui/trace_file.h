// furnace-viz trace files: reads a Chrome trace (JSON object or bare array format, as
// `furnace train --trace` writes it, or one recorded on a real GPU machine) into TimelineData for
// the Timeline panel. Complete events ("X") and begin/end pairs ("B"/"E") become bars; process
// and thread names label the tracks. Furnace's layout (pid = device, tid = stream, tid 1000 =
// phases, pid 1000 = host) is recognised; any other trace gets one track per (pid, tid).
#pragma once

#include <string>

#include "snapshot.h"  // defines: TimelineData

namespace furnace::viz {

// Throws furnace::Error with one line for a missing file or one that is not a Chrome trace.
TimelineData load_chrome_trace(const std::string& path);
TimelineData parse_chrome_trace(const std::string& json_text, const std::string& origin);

}  // namespace furnace::viz
