// wrapped_label: see wrapped_label.h.
#include "wrapped_label.h"

#include <algorithm>
#include <cfloat>

#include "wrap_text.h"  // defines: lesson::wrap_text

namespace furnace::viz {

namespace {

// `text` broken into lines of the content region's width.
std::string wrapped(const std::string& text) {
  ImFont* font = ImGui::GetFont();
  const float size = ImGui::GetFontSize();
  const float width = std::max(ImGui::GetContentRegionAvail().x, size);
  return lesson::wrap_text(text, width, [&](std::string_view s) {
    return static_cast<double>(font->CalcTextSizeA(size, FLT_MAX, 0.0f, s.data(), s.data() + s.size()).x);
  });
}

}  // namespace

float wrapped_label_height(const std::string& text) { return ImGui::CalcTextSize(wrapped(text).c_str()).y; }

void wrapped_label(ImU32 color, const std::string& text) {
  const std::string lines = wrapped(text);
  ImGui::PushStyleColor(ImGuiCol_Text, color);
  ImGui::TextUnformatted(lines.data(), lines.data() + lines.size());
  ImGui::PopStyleColor();
}

}  // namespace furnace::viz
