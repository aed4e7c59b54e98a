// text_in_box and the overflow checks: see text_fit.h.
#include "text_fit.h"

#include <imgui_internal.h>  // defines: ImGuiWindow (the current window's name, content extents)

namespace furnace::viz {
namespace {

TextOverflowLog* installed_log() {
  return ImGui::GetCurrentContext() ? static_cast<TextOverflowLog*>(ImGui::GetIO().UserData) : nullptr;
}

}  // namespace

void set_overflow_log(TextOverflowLog* log) { ImGui::GetIO().UserData = log; }

bool check_fit(const char* text, float room) {
  const float needed = ImGui::CalcTextSize(text).x;
  if (needed <= room + 0.5f) return true;
  if (TextOverflowLog* log = installed_log()) {
    const ImGuiWindow* w = ImGui::GetCurrentWindowRead();
    log->entries.push_back({w ? w->Name : "", text, needed, room});
  }
  return false;
}

void text_in_box(ImDrawList* dl, ImVec2 pos, float room, ImU32 col, const char* text) {
  check_fit(text, room);
  const float line = ImGui::GetTextLineHeight();
  dl->PushClipRect(pos, ImVec2(pos.x + room, pos.y + line + 2), true);
  dl->AddText(pos, col, text);
  dl->PopClipRect();
}

void note_window_overflows(TextOverflowLog& log) {
  const ImGuiContext& g = *ImGui::GetCurrentContext();
  for (const ImGuiWindow* w : g.Windows) {
    if (!w->WasActive || w->Hidden || w->Collapsed || w->SkipItems) continue;
    if (w->Flags & (ImGuiWindowFlags_HorizontalScrollbar | ImGuiWindowFlags_AlwaysAutoResize |
                    ImGuiWindowFlags_Tooltip | ImGuiWindowFlags_Popup))
      continue;
    // A menu bar lays its items out over the whole bar, not inside the window's padding.
    const float edge = (w->Flags & ImGuiWindowFlags_MenuBar) ? w->MenuBarRect().Max.x : w->WorkRect.Max.x;
    const float reach = w->DC.CursorMaxPos.x;
    if (reach > edge + 1.0f) log.entries.push_back({w->Name, "(items of the window)", reach - w->WorkRect.Min.x,
                                                    edge - w->WorkRect.Min.x});
  }
}

void note_window_clipping(TextOverflowLog& log, const std::vector<std::string>& must_fit) {
  const ImGuiContext& g = *ImGui::GetCurrentContext();
  for (const ImGuiWindow* w : g.Windows) {
    if (!w->WasActive || w->Hidden || w->Collapsed || w->SkipItems || w->ParentWindow) continue;
    const std::string name = w->Name;
    const size_t id = name.find("###");
    const std::string key = id == std::string::npos ? name : name.substr(id + 3);
    bool checked = false;
    for (const std::string& k : must_fit) checked = checked || k == key;
    if (!checked) continue;
    const float bottom = w->InnerRect.Max.y - w->WindowPadding.y + w->Scroll.y;
    const float reach = w->DC.CursorMaxPos.y + w->Scroll.y;
    if (reach > bottom + 1.0f)
      log.entries.push_back({w->Name, "(items below the window's bottom)", reach - w->InnerRect.Min.y,
                             bottom - w->InnerRect.Min.y});
  }
}

}  // namespace furnace::viz
