// The visualizer's own words in the learner's language (--lang zh, or the Lesson panel's choice):
// tr(zh, "English", "中文") at each label. ImGui identifies widgets by their label, so a label
// that changes with the language carries a fixed id after "###".
#pragma once

namespace furnace::viz {

inline const char* tr(bool zh, const char* en, const char* zh_text) { return zh ? zh_text : en; }

// Every Chinese character the panels' own labels use: the font atlas adds them to ImGui's common
// Chinese range, which lacks some (帧, 拷, ...). Lesson text brings its own (LessonDriver::all_text).
const char* ui_glyphs();

}  // namespace furnace::viz
