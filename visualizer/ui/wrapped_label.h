// wrapped_label: a paragraph in a panel, wrapped at the window's edge by lesson::wrap_text (the
// Chinese rules, no break inside "40.0 MiB": ImGui 1.86's TextWrapped breaks after any ASCII
// punctuation, so a number can split at its dot), in one colour.
#pragma once

#include <string>

#include <imgui.h>

namespace furnace::viz {

void wrapped_label(ImU32 color, const std::string& text);
// The height wrapped_label(text) takes at the current cursor (its lines, before the item spacing).
float wrapped_label_height(const std::string& text);

}  // namespace furnace::viz
