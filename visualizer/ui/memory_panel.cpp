// MemoryPanel: per GPU, what nvidia-smi would show (the CUDA context plus the caching allocator's
// reserved memory, against capacity) and what PyTorch reports (allocated inside reserved, with the
// peak), both read from the runtime's alloc/free events every frame, and a sampled history of
// allocated and reserved. Bars of the second kind share one scale across GPUs, so DataParallel's
// heavier GPU 0 stands out (pitfalls 6, 7, 14).
#include <algorithm>
#include <cstdio>
#include <string>

#include "panels.h"  // defines: the panel structs, Ui, human_bytes, short_gpu_name
#include "theme.h"   // defines: colors::*, stage_color, with_alpha

namespace furnace::viz {
namespace {

void bar_segment(ImDrawList* dl, float x0, float y0, float h, float from, float to, ImU32 col) {
  if (to <= from) return;
  dl->AddRectFilled(ImVec2(x0 + from, y0), ImVec2(x0 + to, y0 + h), col);
}

// Reserved as an area and allocated as a line, over the kept samples (newest at the right).
// Runs of equal samples draw as one rectangle or one segment: the counters change only now and
// then, so a plot costs a handful of triangles instead of one per sample.
void history_plot(ImDrawList* dl, ImVec2 a, ImVec2 b, const History& alloc, const History& resv, float top) {
  dl->AddRectFilled(a, b, colors::kFree);
  if (alloc.size() < 2 || top <= 0) return;
  const float w = b.x - a.x, h = b.y - a.y;
  const int cap = alloc.capacity();
  auto px = [&](int i, int size) { return a.x + w * static_cast<float>(cap - size + i) / static_cast<float>(cap - 1); };
  auto py = [&](float v) { return b.y - h * std::min(v / top, 1.0f); };
  for (int i = 0; i < resv.size();) {
    int j = i + 1;
    while (j < resv.size() && resv.at(j) == resv.at(i)) ++j;
    dl->AddRectFilled(ImVec2(px(i, resv.size()), py(resv.at(i))), ImVec2(px(j - 1, resv.size()) + 1, b.y),
                      with_alpha(colors::kReserved, 0.55f));
    i = j;
  }
  ImVec2 prev(px(0, alloc.size()), py(alloc.at(0)));
  for (int i = 1; i < alloc.size(); ++i) {
    const bool last = i + 1 == alloc.size();
    if (!last && alloc.at(i) == alloc.at(i - 1) && alloc.at(i + 1) == alloc.at(i)) continue;  // mid-run
    const ImVec2 cur(px(i, alloc.size()), py(alloc.at(i)));
    dl->AddLine(prev, cur, colors::kAllocated, 1.5f);
    prev = cur;
  }
}

}  // namespace

void MemoryPanel::draw_frame(AppState& /*app*/, const Snapshot& snap) {
  ImGui::Checkbox("bars to capacity", &capacity_scale);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("off: PyTorch's bars share the scale of the busiest GPU\non: every bar is the GPU's whole memory");
  ImGui::SameLine();
  const float sw = ImGui::GetTextLineHeight() * 0.8f;
  auto legend = [&](ImU32 c, const char* label) {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + 3), ImVec2(p.x + sw, p.y + 3 + sw), c);
    ImGui::Dummy(ImVec2(sw, sw));
    ImGui::SameLine(0, 3);
    ImGui::TextUnformatted(label);
    ImGui::SameLine();
  };
  legend(colors::kAllocated, "allocated");
  legend(colors::kReserved, "reserved");
  legend(colors::kContext, "CUDA context");
  legend(colors::kPeak, "peak");
  ImGui::NewLine();

  float busiest = 1;  // MiB: the scale of the PyTorch bars and the history plots
  for (const DeviceView& d : snap.devices)
    busiest = std::max({busiest, static_cast<float>(d.peak_reserved) / (1024.0f * 1024.0f), d.reserved_mib.max()});
  busiest *= 1.1f;

  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float line = ImGui::GetTextLineHeight();
  const float width = ImGui::GetContentRegionAvail().x;
  const float label_w = std::min(150.0f, width * 0.22f);
  const float hist_w = std::min(160.0f, width * 0.25f);
  const float bar_w = std::max(40.0f, width - label_w - hist_w - 16);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  char buf[192];
  // Used GPUs get bars and history; GPUs the process never touched get one line (no context).
  for (const DeviceView& d : snap.devices) {
    const ImVec2 o = ImGui::GetCursorScreenPos();
    const float cap = static_cast<float>(std::max<uint64_t>(d.capacity, 1));
    if (!d.used) {
      std::snprintf(buf, sizeof buf, "GPU %d", d.index);
      dl->AddText(o, colors::kTextDim, buf);
      std::snprintf(buf, sizeof buf, "%s: not used by this process, no CUDA context (%s free)",
                    short_gpu_name(d.name).c_str(), human_bytes(cap).c_str());
      dl->PushClipRect(o, ImVec2(o.x + width, o.y + line + 2), true);
      dl->AddText(ImVec2(o.x + label_w, o.y), colors::kTextDim, buf);
      dl->PopClipRect();
      ImGui::Dummy(ImVec2(width, line + 4));
      continue;
    }
    const float row_h = 2 * line + 10;
    if (!ImGui::IsRectVisible(o, ImVec2(o.x + width, o.y + row_h))) {  // scrolled away: space only
      ImGui::Dummy(ImVec2(width, row_h + 4));
      continue;
    }
    // Label.
    std::snprintf(buf, sizeof buf, "GPU %d", d.index);
    dl->AddText(o, colors::kText, buf);
    dl->PushClipRect(ImVec2(o.x, o.y), ImVec2(o.x + label_w - 4, o.y + row_h), true);
    dl->AddText(ImVec2(o.x, o.y + line + 2), colors::kTextDim, short_gpu_name(d.name).c_str());
    dl->PopClipRect();
    const float bx = o.x + label_w;
    // Bar 1, what nvidia-smi shows: the context plus everything reserved, against capacity.
    const float ctx = static_cast<float>(d.context);
    const float h1 = line * 0.75f;
    dl->AddRectFilled(ImVec2(bx, o.y), ImVec2(bx + bar_w, o.y + h1), colors::kFree);
    bar_segment(dl, bx, o.y, h1, 0, bar_w * ctx / cap, colors::kContext);
    bar_segment(dl, bx, o.y, h1, bar_w * ctx / cap,
                bar_w * std::min(1.0f, (ctx + static_cast<float>(d.reserved)) / cap), colors::kReserved);
    // Right-aligned inside the bar; a narrow panel drops words rather than spill onto the label.
    const std::string smi = human_bytes(ctx + static_cast<float>(d.reserved));
    for (const char* format : {"nvidia-smi %s / %s", "smi %s / %s", "%s"}) {
      std::snprintf(buf, sizeof buf, format, smi.c_str(), human_bytes(cap).c_str());
      if (ImGui::CalcTextSize(buf).x <= bar_w - 6) break;
    }
    const float tw = ImGui::CalcTextSize(buf).x;
    dl->PushClipRect(ImVec2(bx, o.y), ImVec2(bx + bar_w, o.y + h1 + 2), true);
    dl->AddText(ImVec2(std::max(bx + 3, bx + bar_w - tw - 3), o.y + (h1 - line) * 0.5f), colors::kTextDim, buf);
    dl->PopClipRect();
    // Bar 2, what PyTorch reports: allocated inside reserved, the peak as a tick.
    const float scale = capacity_scale ? cap : busiest * 1024.0f * 1024.0f;
    const float y2 = o.y + h1 + 3;
    const float h2 = line * 0.9f;
    auto xs = [&](double bytes) { return std::min(bar_w, bar_w * static_cast<float>(bytes) / scale); };
    dl->AddRectFilled(ImVec2(bx, y2), ImVec2(bx + bar_w, y2 + h2), colors::kFree);
    bar_segment(dl, bx, y2, h2, 0, xs(static_cast<double>(d.reserved)), colors::kReserved);
    bar_segment(dl, bx, y2, h2, 0, xs(static_cast<double>(d.allocated)), colors::kAllocated);
    const float pk = xs(static_cast<double>(d.peak_allocated));
    if (pk > 0) dl->AddLine(ImVec2(bx + pk, y2 - 1), ImVec2(bx + pk, y2 + h2 + 1), colors::kPeak, 2);
    std::snprintf(buf, sizeof buf, "allocated %s   reserved %s   context %s",
                  human_bytes(static_cast<double>(d.allocated)).c_str(),
                  human_bytes(static_cast<double>(d.reserved)).c_str(), human_bytes(ctx).c_str());
    dl->PushClipRect(ImVec2(bx, y2 + h2), ImVec2(bx + bar_w, y2 + h2 + line + 2), true);
    dl->AddText(ImVec2(bx, y2 + h2 + 1), colors::kTextDim, buf);
    dl->PopClipRect();
    // History.
    const ImVec2 ha(bx + bar_w + 10, o.y), hb(ha.x + hist_w, o.y + row_h - 4);
    history_plot(dl, ha, hb, d.allocated_mib, d.reserved_mib, busiest);
    if (mouse.x >= o.x && mouse.x < hb.x && mouse.y >= o.y && mouse.y < o.y + row_h)
      ImGui::SetTooltip("GPU %d  %s\nmemory_allocated %s (peak %s)\nmemory_reserved  %s (peak %s)\n"
                        "CUDA context     %s\ncapacity         %s\n"
                        "nvidia-smi shows context + reserved; freed tensors stay reserved (cached)\n"
                        "history: the last %.0f s, allocated (line) and reserved (area)",
                        d.index, d.name.c_str(), human_bytes(static_cast<double>(d.allocated)).c_str(),
                        human_bytes(static_cast<double>(d.peak_allocated)).c_str(),
                        human_bytes(static_cast<double>(d.reserved)).c_str(),
                        human_bytes(static_cast<double>(d.peak_reserved)).c_str(), human_bytes(ctx).c_str(),
                        human_bytes(cap).c_str(), d.allocated_mib.capacity() * 0.1);
    ImGui::Dummy(ImVec2(width, row_h + 4));
  }
}

}  // namespace furnace::viz
