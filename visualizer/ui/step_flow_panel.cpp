// StepFlowPanel: one training step, stage by stage, as the trace's phase events describe it: the
// batch going to the device(s) (h2d, or scatter in chunks), parameters broadcast from
// device_ids[0] (replicate), forward on each device, outputs flowing to output_device (gather),
// the loss, backward, gradients summed into device_ids[0] (reduce), the optimizer step and the
// scaler's check. Each stage is a quick transition followed by a pause; the strip at the bottom
// shows the stages to scale with their modelled (or measured) durations.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "panels.h"  // defines: the panel structs, Ui, human_bytes, short_gpu_name
#include "theme.h"   // defines: colors::*, stage_color, with_alpha

namespace furnace::viz {
namespace {

ImVec2 lerp(ImVec2 a, ImVec2 b, float t) { return ImVec2(a.x + (b.x - a.x) * t, a.y + (b.y - a.y) * t); }

void token(ImDrawList* dl, ImVec2 c, ImU32 col, const char* label, float w = 34, float h = 18) {
  const ImVec2 a(c.x - w * 0.5f, c.y - h * 0.5f), b(c.x + w * 0.5f, c.y + h * 0.5f);
  dl->AddRectFilled(a, b, col);
  const ImVec2 s = ImGui::CalcTextSize(label);
  dl->PushClipRect(a, b, true);
  dl->AddText(ImVec2(c.x - s.x * 0.5f, c.y - s.y * 0.5f), colors::rgb(20, 20, 24), label);
  dl->PopClipRect();
}

}  // namespace

void StepFlowPanel::update(const Snapshot& snap, float dt) {
  auto show = [&](const StepPhases& step) {
    shown = step;
    stages = build_stages(shown);
    player.restart(shown.step);
  };
  if (snap.run.generation != generation) {  // a new run: start over
    generation = snap.run.generation;
    shown = StepPhases{};
    stages.clear();
    player.restart(-1);
  }
  if (snap.steps.empty()) return;
  if (shown.spans.empty()) show(snap.steps.back());
  if (!hold_stage.empty()) {  // --stage: jump there and pause mid-flight (screenshots, lessons)
    if (shown.step != snap.steps.back().step) show(snap.steps.back());
    for (size_t i = 0; i < stages.size(); ++i)
      if (hold_stage == stages[i].name) {
        player.jump(static_cast<int>(i));
        player.playing = false;
        player.once = false;
        player.t = StepFlowPlayer::kTransition * hold_progress;
        hold_stage.clear();
        break;
      }
    return;  // not in this step: try the next one
  }
  if (player.advance(dt, static_cast<int>(stages.size())) && player.follow && snap.steps.back().step != shown.step)
    show(snap.steps.back());
}

void StepFlowPanel::draw_frame(AppState& /*app*/, const Snapshot& /*snap*/) {
  // ---- playback controls ----------------------------------------------------------------
  if (ImGui::Button(player.playing ? "Pause" : "Play")) {
    player.playing = !player.playing;
    player.once = false;
  }
  ImGui::SameLine();
  if (ImGui::Button("Step")) player.step_phase(static_cast<int>(stages.size()));
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("play the next phase, then pause");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(110);
  ImGui::SliderFloat("speed", &player.speed, 0.1f, 4.0f, "%.1fx", ImGuiSliderFlags_Logarithmic);
  ImGui::SameLine();
  ImGui::Checkbox("follow", &player.follow);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("after the last phase, move on to the newest step");
  const StepPhases* step = shown.spans.empty() ? nullptr : &shown;
  ImGui::SameLine();
  if (step)
    ImGui::TextDisabled("step %lld  (loss %.4f)", static_cast<long long>(step->step + 1), step->loss);
  else
    ImGui::TextDisabled("waiting for the first step's phase events");
  if (!step || stages.empty()) return;

  const int cur = std::clamp(player.stage, 0, static_cast<int>(stages.size()) - 1);
  const Stage& st = stages[static_cast<size_t>(cur)];
  const float p = player.transition();
  char buf[192];
  if (st.repeat > 1)
    std::snprintf(buf, sizeof buf, "%s (micro-step %d)", st.name, st.repeat);
  else
    std::snprintf(buf, sizeof buf, "%s", st.name);
  ImGui::PushStyleColor(ImGuiCol_Text, stage_color(st.kind));
  ImGui::TextUnformatted(buf);
  ImGui::PopStyleColor();
  ImGui::SameLine();
  double step_total = 0;
  for (const Stage& s : stages) step_total += s.dur;
  ImGui::TextDisabled("%s  (%s, %.0f%% of the step)", stage_caption(st.kind), human_seconds(st.dur).c_str(),
                      step_total > 0 ? 100.0 * st.dur / step_total : 0.0);

  // ---- the diagram ------------------------------------------------------------------------
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float line = ImGui::GetTextLineHeight();
  const float strip_h = 2 * line + 10;
  const float width = std::max(avail.x, 200.0f);
  const float height = std::max(avail.y - strip_h, 6 * line);
  const std::vector<int> devices = step_devices(*step);
  const int hub = hub_device(*step);
  const int n = static_cast<int>(devices.size());
  const float gap = 10;
  const float box_w = std::min(150.0f, (width - gap * static_cast<float>(n - 1)) / static_cast<float>(std::max(n, 1)));
  const float box_h = std::min(3 * line + 16, height * 0.42f);
  const float row_w = box_w * static_cast<float>(n) + gap * static_cast<float>(n - 1);
  const float x0 = origin.x + (width - row_w) * 0.5f;
  const float dev_y = origin.y + height - box_h - 4;
  const ImVec2 host_a(origin.x + width * 0.5f - 70, origin.y + 2), host_b(origin.x + width * 0.5f + 70, origin.y + 2 + 2 * line + 6);
  const ImVec2 host_c((host_a.x + host_b.x) * 0.5f, host_b.y);
  auto dev_index = [&](int device) {
    return static_cast<int>(std::find(devices.begin(), devices.end(), device) - devices.begin());
  };
  auto dev_top = [&](int device) {
    const int i = dev_index(device);
    return ImVec2(x0 + static_cast<float>(i) * (box_w + gap) + box_w * 0.5f, dev_y);
  };
  const ImVec2 hub_top = dev_top(hub);

  // Host and devices.
  dl->AddRectFilled(host_a, host_b, colors::kHost, 4);
  std::snprintf(buf, sizeof buf, "host (CPU)");
  dl->AddText(ImVec2(host_a.x + 6, host_a.y + 3), colors::kText, buf);
  dl->AddText(ImVec2(host_a.x + 6, host_a.y + 3 + line), colors::kTextDim, "the batch, the loop");
  for (int i = 0; i < n; ++i) {
    const int d = devices[static_cast<size_t>(i)];
    const ImVec2 a(x0 + static_cast<float>(i) * (box_w + gap), dev_y), b(a.x + box_w, dev_y + box_h);
    const PhaseSpan* span = nullptr;
    for (const PhaseSpan& s : st.spans)
      if (s.device == d) span = &s;
    dl->AddRectFilled(a, b, colors::kGpuBox, 4);
    dl->AddRect(a, b, span ? stage_color(st.kind) : colors::kGrid, 4, 0, span ? 2.5f : 1.0f);
    dl->PushClipRect(a, b, true);
    std::snprintf(buf, sizeof buf, "cuda:%d", d);
    dl->AddText(ImVec2(a.x + 5, a.y + 3), colors::kText, buf);
    if (d == hub && n > 1) {  // where the loss is, the parameters live and the gradients meet
      const float tw = ImGui::CalcTextSize("[0]").x;
      dl->AddText(ImVec2(b.x - tw - 5, a.y + 3), colors::kPeak, "[0]");
    }
    if (span) {
      std::snprintf(buf, sizeof buf, "%s", human_seconds(span->dur).c_str());
      dl->AddText(ImVec2(a.x + 5, a.y + 3 + line), colors::kTextDim, buf);
      if (span->copy_bytes) {
        std::snprintf(buf, sizeof buf, "%s copied", human_bytes(static_cast<double>(span->copy_bytes)).c_str());
        dl->AddText(ImVec2(a.x + 5, a.y + 3 + 2 * line), colors::kTextDim, buf);
      }
    }
    dl->PopClipRect();
    // Compute stages fill a bar in proportion to the device's share of the stage's time.
    if (span && (st.kind == StageKind::forward || st.kind == StageKind::backward || st.kind == StageKind::other ||
                 st.kind == StageKind::optimizer || st.kind == StageKind::loss)) {
      const float share = st.dur > 0 ? static_cast<float>(span->dur / st.dur) : 1.0f;
      dl->AddRectFilled(ImVec2(a.x + 3, b.y - 7), ImVec2(a.x + 3 + (box_w - 6) * share * p, b.y - 3),
                        stage_color(st.kind));
    }
  }

  // The stage's motion.
  const ImU32 col = stage_color(st.kind);
  switch (st.kind) {
    case StageKind::host_to_device:
    case StageKind::scatter:
      for (size_t i = 0; i < st.spans.size(); ++i) {  // chunk i leaves its slice of the batch
        const PhaseSpan& s = st.spans[i];
        const double kib = static_cast<double>(s.copy_bytes) / 1024.0;
        if (n >= 5)  // narrow boxes: "98K"
          std::snprintf(buf, sizeof buf, kib >= 1024 ? "%.0fM" : "%.0fK", kib >= 1024 ? kib / 1024 : kib);
        else
          std::snprintf(buf, sizeof buf, "%s", s.copy_bytes ? human_bytes(static_cast<double>(s.copy_bytes)).c_str() : "x");
        const float slice = (host_b.x - host_a.x) / static_cast<float>(st.spans.size());
        const ImVec2 from(host_a.x + slice * (static_cast<float>(i) + 0.5f), host_b.y);
        const float room = std::max(slice, (box_w + gap) * p) - 3;
        const float w = std::min(ImGui::CalcTextSize(buf).x + 10, std::max(room, 12.0f));
        token(dl, lerp(from, dev_top(s.device), p), col, buf, w);
      }
      break;
    case StageKind::replicate:
      for (const PhaseSpan& s : st.spans)
        if (s.device != hub || n == 1) token(dl, lerp(hub_top, dev_top(s.device), p), col, "W");
      break;
    case StageKind::gather_backward:
      for (const PhaseSpan& s : st.spans)
        if (s.device != hub) token(dl, lerp(hub_top, dev_top(s.device), p), col, "∂out", 40);
      break;
    case StageKind::gather:
      for (const PhaseSpan& s : st.spans)
        if (s.device != hub) token(dl, lerp(dev_top(s.device), hub_top, p), col, "out");
      if (n == 1 || st.spans.size() == 1) token(dl, ImVec2(hub_top.x, hub_top.y - 14), col, "out");
      break;
    case StageKind::reduce:
      for (const PhaseSpan& s : st.spans)
        if (s.device != hub) token(dl, lerp(dev_top(s.device), hub_top, p), col, "∇");
      if (p >= 1.0f) token(dl, ImVec2(hub_top.x, hub_top.y - 14), col, "Σ ∇", 44);
      break;
    case StageKind::loss:
      std::snprintf(buf, sizeof buf, "loss %.4f", step->loss);
      token(dl, ImVec2(hub_top.x, hub_top.y - 14 - 10 * (1 - p)), with_alpha(col, 0.3f + 0.7f * p), buf, ImGui::CalcTextSize(buf).x + 12);
      break;
    case StageKind::backward:
      for (const PhaseSpan& s : st.spans) token(dl, ImVec2(dev_top(s.device).x, dev_top(s.device).y - 14), with_alpha(col, p), "∇W");
      break;
    case StageKind::forward:
      for (const PhaseSpan& s : st.spans) token(dl, ImVec2(dev_top(s.device).x, dev_top(s.device).y - 14), with_alpha(col, p), "x→y");
      break;
    case StageKind::optimizer:
      for (const PhaseSpan& s : st.spans)
        token(dl, ImVec2(dev_top(s.device).x, dev_top(s.device).y - 14), with_alpha(col, 1.0f - 0.5f * p), "W -= lr·v", 76);
      break;
    case StageKind::scaler:
      token(dl, ImVec2(hub_top.x, hub_top.y - 14), col, "inf/NaN? step : skip", 150);
      break;
    case StageKind::other:
      for (const PhaseSpan& s : st.spans) token(dl, ImVec2(dev_top(s.device).x, dev_top(s.device).y - 14), with_alpha(col, p), st.name, ImGui::CalcTextSize(st.name).x + 12);
      break;
  }
  ImGui::Dummy(ImVec2(width, height));

  // ---- the stage strip, to scale ----------------------------------------------------------
  double total = 0;
  for (const Stage& s : stages) total += s.dur;
  const ImVec2 sa = ImGui::GetCursorScreenPos();
  const float min_w = 6;
  const float usable = width - min_w * static_cast<float>(stages.size());
  float x = sa.x;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    const float w = min_w + (total > 0 ? usable * static_cast<float>(s.dur / total) : usable / static_cast<float>(stages.size()));
    const ImVec2 a(x, sa.y), b(x + w - 1, sa.y + line + 4);
    const bool current = static_cast<int>(i) == cur;
    dl->AddRectFilled(a, b, with_alpha(stage_color(s.kind), current ? 1.0f : 0.45f));
    if (current) dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, b.y + 1), colors::kText, 2, 0, 1.5f);
    if (ImGui::CalcTextSize(s.name).x + 4 < w) {
      dl->PushClipRect(a, b, true);
      dl->AddText(ImVec2(a.x + 2, a.y + 2), colors::rgb(16, 16, 20), s.name);
      dl->PopClipRect();
    }
    if (mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y) {
      ImGui::SetTooltip("%s: %s on %zu device%s (%.0f%% of the step)%s\nclick to jump here", s.name,
                        human_seconds(s.dur).c_str(), s.spans.size(), s.spans.size() == 1 ? "" : "s",
                        total > 0 ? 100.0 * s.dur / total : 0.0, s.bytes ? ", with copies" : "");
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) player.jump(static_cast<int>(i));
    }
    x += w;
  }
  ImGui::Dummy(ImVec2(width, line + 6));
  ImGui::TextDisabled("one step = %s of modelled device time; widths to scale", human_seconds(total).c_str());
}

}  // namespace furnace::viz
