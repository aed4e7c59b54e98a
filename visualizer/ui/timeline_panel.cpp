// TimelinePanel: a small Nsight/Perfetto-like view: one row per device stream plus a row of
// training phases per device, kernels and copies as bars on the modelled (sim) or measured (cuda)
// clock. Follows the live run, or shows a Chrome trace file (one recorded on a real GPU machine,
// say). Mouse wheel zooms around the cursor, dragging pans, double-click fits. Only the visible
// part is drawn, and bars thinner than a pixel merge, so a long trace costs what the screen holds.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <imgui.h>
#include <imgui_stdlib.h>  // defines: ImGui::InputText for std::string

#include "lang.h"        // defines: tr
#include "panels.h"      // defines: the panel structs, Ui, human_bytes, short_gpu_name
#include "run_banner.h"  // defines: draw_run_banner
#include "text_fit.h"    // defines: text_in_box
#include "theme.h"   // defines: colors::*, stage_color, with_alpha

namespace furnace::viz {
namespace {

ImU32 event_color(const TimelineEvent& e) {
  switch (e.kind) {
    case EventKind::copy: return colors::kCopy;
    case EventKind::phase: return stage_color(stage_kind(e.name));
    default: return colors::kKernel;
  }
}

// A "nice" tick step (1, 2, 5 x 10^k) for about `target` ticks over `span`.
double tick_step(double span, int target) {
  const double raw = span / std::max(target, 1);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

// A track's label in the learner's language: "cuda:0 phases" -> "cuda:0 阶段", "stream 1" ->
// "流 1", "comm" -> "comm 流" (the device and GPU names stay as they are).
std::string track_label(const std::string& label, bool zh) {
  if (!zh) return label;
  std::string out = label;
  auto swap_suffix = [&](const std::string& from, const std::string& to) {
    if (out.size() < from.size() || out.compare(out.size() - from.size(), from.size(), from) != 0) return false;
    out.replace(out.size() - from.size(), from.size(), to);
    return true;
  };
  if (swap_suffix(" phases", " 阶段") || swap_suffix(" comm", " comm 流")) return out;
  const size_t at = out.rfind("stream ");
  if (at != std::string::npos) out.replace(at, 7, "流 ");
  return out;
}

// A label that does not fit `width` keeps its ends: "cuda:0 NVIDIA GeForce RTX 4060 Laptop GPU /
// stream 0" (a trace file's process and thread) becomes "cuda:0 ... / stream 0", so every row
// still says which device and which track; an event's tooltip has the whole label.
std::string fitted_label(const std::string& label, float width) {
  if (ImGui::CalcTextSize(label.c_str()).x <= width) return label;
  const size_t slash = label.rfind(" / ");
  const size_t space = label.find(' ');
  if (slash == std::string::npos || space == std::string::npos || space >= slash) return label;
  return label.substr(0, space) + " ..." + label.substr(slash);
}

}  // namespace

void TimelinePanel::draw_frame(AppState& app, const Snapshot& snap) {
  const bool have_file = !snap.file_timeline.tracks.empty();
  if (have_file && snap.file_timeline.source != path_shown_for) {  // opened by --trace-file or a drop
    path = snap.file_timeline.source;
    path_shown_for = snap.file_timeline.source;
  }
  const TimelineData& data = have_file && show_file ? snap.file_timeline : snap.timeline;
  const bool live = &data == &snap.timeline;
  if (&data != last_data || (!live && data.source != last_source)) {  // a new source: fit it
    last_data = &data;
    last_source = data.source;
    view_span = 0;
    follow = live;
    auto_span = true;
  }

  // ---- toolbar ------------------------------------------------------------------------------
  const bool zh = app.lesson.zh;
  if (have_file) {
    int src = show_file ? 1 : 0;
    ImGui::RadioButton(tr(zh, "live###live", "实时###live"), &src, 0);
    ImGui::SameLine();
    ImGui::RadioButton(tr(zh, "file###file", "文件###file"), &src, 1);
    show_file = src == 1;
    ImGui::SameLine();
  }
  ImGui::BeginDisabled(!live);
  ImGui::Checkbox(tr(zh, "follow###follow", "跟随###follow"), &follow);
  ImGui::EndDisabled();
  ImGui::SameLine();
  if (ImGui::Button(tr(zh, "fit###fit", "全部###fit"))) {
    follow = false;
    auto_span = false;
    view_start = data.t_min;
    view_span = std::max(data.t_max - data.t_min, 1e-9);
  }
  // The field gives up width for what follows it on the line (open, close, the clock, the
  // legend); what still does not fit (a narrow panel beside a lesson) goes on the next line.
  const ImGuiStyle& style = ImGui::GetStyle();
  const char* open = tr(zh, "open###open", "打开###open");
  const char* close = tr(zh, "close###close", "关闭###close");
  const char* clock = live ? tr(zh, "live, modelled device clock", "实时，建模的设备时钟") : data.source.c_str();
  const float swatch = ImGui::GetTextLineHeight() * 0.8f;
  const std::pair<ImU32, const char*> legend[] = {{colors::kKernel, "kernel"}, {colors::kCopy, "copy"}};
  auto button_w = [&](const char* label) { return ImGui::CalcTextSize(label, nullptr, true).x + 2 * style.FramePadding.x; };
  auto legend_w = [&](const char* label) { return swatch + 3 + ImGui::CalcTextSize(label).x; };
  float after = button_w(open) + (have_file ? style.ItemSpacing.x + button_w(close) : 0.0f) +
                style.ItemSpacing.x + ImGui::CalcTextSize(clock).x;
  for (const auto& item : legend) after += style.ItemSpacing.x + legend_w(item.second);
  const float right_edge = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  auto same_line_if_fits = [&](float w) {
    if (right_edge - ImGui::GetItemRectMax().x >= style.ItemSpacing.x + w) ImGui::SameLine();
  };
  ImGui::SameLine();
  const float avail = ImGui::GetContentRegionAvail().x;
  ImGui::SetNextItemWidth(std::max(100.0f, std::min(avail * 0.35f, avail - style.ItemSpacing.x - after)));
  ImGui::InputTextWithHint("##trace", "trace.json (furnace train --trace)", &path);
  same_line_if_fits(button_w(open));
  if (ImGui::Button(open) && !path.empty()) {
    app.open_trace = path;
    show_file = true;
  }
  if (have_file) {
    same_line_if_fits(button_w(close));
    if (ImGui::Button(close)) app.close_trace_requested = true;
  }
  same_line_if_fits(ImGui::CalcTextSize(clock).x);
  ImGui::TextDisabled("%s", clock);
  for (const auto& [col, label] : legend) {
    same_line_if_fits(legend_w(label));
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + 3), ImVec2(p.x + swatch, p.y + 3 + swatch), col);
    ImGui::Dummy(ImVec2(swatch, swatch));
    ImGui::SameLine(0, 3);
    ImGui::TextDisabled("%s", label);
  }
  if (!app.trace_error.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, colors::kError);
    ImGui::TextWrapped("%s", app.trace_error.c_str());
    ImGui::PopStyleColor();
  }
  if (live && draw_run_banner(app, snap)) return;
  if (data.tracks.empty()) {
    ImGui::TextDisabled("%s", tr(zh, "no events yet", "还没有事件"));
    return;
  }

  // ---- the view -----------------------------------------------------------------------------
  if (view_span <= 0 || (live && auto_span)) {
    double span = data.t_max - data.t_min;
    if (live && !snap.steps.empty()) {  // about three steps, until the user zooms
      const StepPhases& s = snap.steps.back();
      double a = s.spans.front().start, b = a;
      for (const PhaseSpan& p : s.spans) {
        a = std::min(a, p.start);
        b = std::max(b, p.start + p.dur);
      }
      if (b > a) span = std::min(span, 1.6 * (b - a));
    }
    view_span = std::max(span, 1e-9);
    view_start = live ? data.t_max - view_span : data.t_min;
  }
  if (live && follow) {  // the right edge on the end of the newest complete step: it moves once a step
    double end = data.t_max;
    if (!snap.steps.empty()) {
      end = 0;
      for (const PhaseSpan& p : snap.steps.back().spans) end = std::max(end, p.start + p.dur);
    }
    view_start = end + 0.05 * view_span - view_span;
  }

  const float line = ImGui::GetTextLineHeight();
  const float label_w = std::min(170.0f, ImGui::GetContentRegionAvail().x * 0.2f);
  const ImVec2 top = ImGui::GetCursorScreenPos();
  const float width = ImGui::GetContentRegionAvail().x;
  const float canvas_x = top.x + label_w;
  const float canvas_w = std::max(width - label_w, 50.0f);
  const float row_h = line + 6;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const double px_per_s = canvas_w / view_span;
  auto to_x = [&](double t) { return canvas_x + static_cast<float>((t - view_start) * px_per_s); };

  // Time axis.
  const double tick = tick_step(view_span, std::max(2, static_cast<int>(canvas_w / 110)));
  const double first = std::ceil(view_start / tick) * tick;
  char buf[160];
  const double largest = std::max(std::abs(view_start), std::abs(view_start + view_span));
  for (double t = first; t <= view_start + view_span; t += tick) {
    const float x = to_x(t);
    dl->AddLine(ImVec2(x, top.y + line), ImVec2(x, top.y + line + 4), colors::kTextDim);
    std::snprintf(buf, sizeof buf, "%s", axis_seconds(t, tick, largest).c_str());
    // A label that would run past the right edge is left out (its tick stays).
    if (x + 2 + ImGui::CalcTextSize(buf).x <= top.x + width) text_in_box(dl, ImVec2(x + 2, top.y), top.x + width - x - 2, colors::kTextDim, buf);
  }
  ImGui::Dummy(ImVec2(width, line + 6));

  // Interaction on the whole track area.
  const float area_h = std::max(ImGui::GetContentRegionAvail().y, row_h);
  ImGui::BeginChild("##tracks", ImVec2(width, area_h), false, ImGuiWindowFlags_NoScrollWithMouse);
  const ImGuiIO& io = ImGui::GetIO();
  const bool hovered = ImGui::IsWindowHovered();
  if (hovered && io.MousePos.x >= canvas_x) {
    if (io.MouseWheel != 0) {
      const double at = view_start + (io.MousePos.x - canvas_x) / px_per_s;
      const double factor = std::pow(0.8, static_cast<double>(io.MouseWheel));
      view_span = std::clamp(view_span * factor, 1e-9, 1e6);
      auto_span = false;
      view_start = at - (io.MousePos.x - canvas_x) / (canvas_w / view_span);
      follow = false;
    }
    if (ImGui::IsMouseDragging(ImGuiMouseButton_Left)) {
      view_start -= io.MouseDelta.x / px_per_s;
      follow = false;
    }
    if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
      auto_span = false;
      view_start = data.t_min;
      view_span = std::max(data.t_max - data.t_min, 1e-9);
      follow = false;
    }
  }
  if (ImGui::GetScrollMaxY() > 0 && hovered && io.MousePos.x < canvas_x && io.MouseWheel != 0)
    ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * row_h * 2);

  dl = ImGui::GetWindowDrawList();
  const double view_end = view_start + view_span;
  const TimelineEvent* hover = nullptr;
  const TimelineTrack* hover_track = nullptr;
  ImGuiListClipper clipper;
  clipper.Begin(static_cast<int>(data.tracks.size()), row_h);
  while (clipper.Step()) {
    for (int r = clipper.DisplayStart; r < clipper.DisplayEnd; ++r) {
      const TimelineTrack& tr = data.tracks[static_cast<size_t>(r)];
      const ImVec2 o = ImGui::GetCursorScreenPos();
      const bool phases = tr.stream == TimelineTrack::kPhases;
      dl->AddLine(ImVec2(o.x, o.y + row_h - 1), ImVec2(canvas_x + canvas_w, o.y + row_h - 1), colors::kGrid);
      dl->PushClipRect(ImVec2(o.x, o.y), ImVec2(canvas_x - 4, o.y + row_h), true);
      dl->AddText(ImVec2(o.x + 2, o.y + 3), phases ? colors::kText : colors::kTextDim,
                  fitted_label(track_label(tr.label, zh), canvas_x - 6 - o.x).c_str());
      dl->PopClipRect();
      dl->PushClipRect(ImVec2(canvas_x, o.y), ImVec2(canvas_x + canvas_w, o.y + row_h), true);
      const auto& ev = tr.events;
      auto it = std::lower_bound(ev.begin(), ev.end(), view_start,
                                 [](const TimelineEvent& e, double t) { return e.start < t; });
      for (int back = 0; back < 64 && it != ev.begin() && (it - 1)->start + (it - 1)->dur > view_start; ++back) --it;
      float run_a = -1, run_b = -1;
      ImU32 run_col = 0;
      auto flush = [&] {
        if (run_b >= run_a && run_a >= 0)
          dl->AddRectFilled(ImVec2(run_a, o.y + 2), ImVec2(std::max(run_b, run_a + 1), o.y + row_h - 3), run_col);
        run_a = run_b = -1;
      };
      float label_end = -1e30f;  // where the last name drawn on this row ends
      for (; it != ev.end() && it->start <= view_end; ++it) {
        const float xa = to_x(it->start), xb = to_x(it->start + it->dur);
        const ImU32 col = event_color(*it);
        if (xb - xa < 2 && run_a >= 0 && xa <= run_b + 1 && col == run_col) {  // merge slivers
          run_b = std::max(run_b, xb);
        } else {
          flush();
          run_a = xa;
          run_b = xb;
          run_col = col;
          if (xb - xa >= 2) {
            flush();
            dl->AddRectFilled(ImVec2(xa, o.y + 2), ImVec2(xb - 1, o.y + row_h - 3), col);
            // A name inside its bar, where the visible part of the bar holds it and no earlier
            // name on this row reaches it (overlapping events, as a comm stream's all-reduces,
            // drew "all_rall_reduce").
            const float text_x = std::max(xa, canvas_x) + 3;
            if (xb - xa > 30 && text_x >= label_end + 4) {
              const float tw = ImGui::CalcTextSize(it->name).x;
              if (text_x + tw + 3 < xb) {
                dl->AddText(ImVec2(text_x, o.y + 3), colors::rgb(16, 16, 20), it->name);
                label_end = text_x + tw;
              }
            }
          }
        }
        if (hovered && io.MousePos.y >= o.y && io.MousePos.y < o.y + row_h && io.MousePos.x >= xa - 1 &&
            io.MousePos.x <= std::max(xb, xa + 2)) {
          hover = &*it;
          hover_track = &tr;
        }
      }
      flush();
      dl->PopClipRect();
      ImGui::Dummy(ImVec2(ImGui::GetContentRegionAvail().x, row_h));  // left of the scroll bar
    }
  }
  clipper.End();
  if (hover) {
    std::string extra;
    if (hover->bytes)
      extra += "\n" + human_bytes(static_cast<double>(hover->bytes)) +
               (hover->kind == EventKind::phase ? ::furnace::viz::tr(zh, " copied in the phase", " 在这一阶段内拷贝") : "");
    if (hover->flops > 0) {
      std::snprintf(buf, sizeof buf, "\n%.3g GFLOP", hover->flops / 1e9);
      extra += buf;
    }
    ImGui::SetTooltip(::furnace::viz::tr(zh, "%s (%s)\n%s  start %s  duration %s%s", "%s（%s）\n%s  开始 %s  时长 %s%s"),
                      hover->name, event_kind_name(hover->kind), track_label(hover_track->label, zh).c_str(), human_seconds(hover->start).c_str(),
                      human_seconds(hover->dur).c_str(), extra.c_str());
  }
  ImGui::EndChild();
}

}  // namespace furnace::viz
