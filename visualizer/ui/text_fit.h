// Text that must fit the room the layout gives it. Panels draw their draw-list text (labels in
// boxes, captions beside bars) through text_in_box, which clips it to its room and, when a
// TextOverflowLog is installed (the headless tests), notes every text that did not fit; ImGui's
// own items (Text, buttons, combos) are checked per window by note_window_overflows. The app
// installs no log: there the helpers only draw.
#pragma once

#include <string>
#include <vector>

#include <imgui.h>

namespace furnace::viz {

struct TextOverflow {
  std::string window;  // the ImGui window it was drawn in
  std::string text;
  float needed = 0, room = 0;  // pixels
};

struct TextOverflowLog {
  std::vector<TextOverflow> entries;
};

// Installs `log` in the current ImGui context (io.UserData); null removes it.
void set_overflow_log(TextOverflowLog* log);
// Whether `text` fits `room` pixels of width; notes it in the installed log when it does not.
bool check_fit(const char* text, float room);
// Draws `text` at `pos`, clipped to `room` pixels of width (and one line), noting an overflow.
void text_in_box(ImDrawList* dl, ImVec2 pos, float room, ImU32 col, const char* text);
// After a frame (ImGui::Render): notes each visible window whose items reach past its right edge
// (content wider than the window, with no horizontal scroll bar to reach it).
void note_window_overflows(TextOverflowLog& log);
// After a frame: notes each visible window among `must_fit` (ids, the part after "###") whose
// items reach below its bottom edge: a panel whose last rows are cut at this size (lists that
// grow with the machine, such as Memory's GPUs or the Timeline's tracks, scroll by design).
void note_window_clipping(TextOverflowLog& log, const std::vector<std::string>& must_fit);

}  // namespace furnace::viz
