// TrainingPanel: progress, throughput, the loss and training-accuracy curves (decimated to a
// bounded number of points), and the mixed-precision and accumulation state: the loss scale with
// skipped steps under fp16, the micro-step inside an effective batch (pitfalls 12, 13).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "panels.h"  // defines: the panel structs, Ui, human_bytes, short_gpu_name
#include "theme.h"   // defines: colors::*, stage_color, with_alpha

namespace furnace::viz {
namespace {

// A line plot of `v` filling `size`, y from lo to hi, with the last value printed.
void curve(const char* label, const std::vector<float>& v, ImVec2 size, ImU32 col, float lo, float hi,
           const char* fmt) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 a = ImGui::GetCursorScreenPos(), b(a.x + size.x, a.y + size.y);
  dl->AddRect(a, b, colors::kGrid, 3);  // an outline: filled areas cost fill rate in software GL
  for (int g = 1; g < 4; ++g) {
    const float y = a.y + size.y * static_cast<float>(g) / 4.0f;
    dl->AddLine(ImVec2(a.x, y), ImVec2(b.x, y), colors::kGrid);
  }
  char buf[96];
  if (v.size() >= 2 && hi > lo) {
    const float dx = size.x / static_cast<float>(v.size() - 1);
    // One segment per pixel column at most: long series draw as their envelope.
    const size_t step = std::max<size_t>(1, static_cast<size_t>(std::ceil(static_cast<float>(v.size()) / size.x)));
    auto y = [&](float x) { return b.y - 2 - (size.y - 4) * std::clamp((x - lo) / (hi - lo), 0.0f, 1.0f); };
    for (size_t i = step; i < v.size(); i += step)
      dl->AddLine(ImVec2(a.x + dx * static_cast<float>(i - step), y(v[i - step])), ImVec2(a.x + dx * static_cast<float>(i), y(v[i])), col, 1.5f);
    std::snprintf(buf, sizeof buf, fmt, v.back());
  } else {
    std::snprintf(buf, sizeof buf, "%s", "waiting for steps");
  }
  dl->AddText(ImVec2(a.x + 4, a.y + 2), col, label);
  const ImVec2 s = ImGui::CalcTextSize(buf);
  // The value at the top right, or under the label when the two would overlap (a narrow panel).
  const float line = ImGui::GetTextLineHeight();
  if (a.x + 4 + ImGui::CalcTextSize(label).x + 8 <= b.x - s.x - 4)
    dl->AddText(ImVec2(b.x - s.x - 4, a.y + 2), colors::kText, buf);
  else
    dl->AddText(ImVec2(a.x + 4, a.y + 2 + line), colors::kText, buf);
  std::snprintf(buf, sizeof buf, "%.3g", hi);
  const float hw = ImGui::CalcTextSize(buf).x;
  dl->AddText(ImVec2(b.x - hw - 4, a.y + 2 + line), colors::kTextDim, buf);
  std::snprintf(buf, sizeof buf, "%.3g", lo);
  dl->AddText(ImVec2(b.x - ImGui::CalcTextSize(buf).x - 4, b.y - ImGui::GetTextLineHeight() - 2), colors::kTextDim, buf);
  ImGui::Dummy(size);
}

}  // namespace

void TrainingPanel::draw_frame(AppState& /*app*/, const Snapshot& snap) {
  const TrainingSeries& t = snap.training;
  char buf[160];
  const float frac = t.steps_per_epoch ? static_cast<float>(t.step_in_epoch) / static_cast<float>(t.steps_per_epoch) : 0.0f;
  std::snprintf(buf, sizeof buf, "epoch %d/%d  step %lld/%lld", t.epoch, t.epochs,
                static_cast<long long>(t.step_in_epoch), static_cast<long long>(t.steps_per_epoch));
  ImGui::ProgressBar(frac, ImVec2(-1, 0), buf);
  ImGui::Text("%.0f samples/s", t.samples_per_s);
  ImGui::SameLine();
  ImGui::TextDisabled("(wall clock, this CPU)   ETA %s", t.total_steps ? format_duration(t.eta_s).c_str() : "--:--");
  if (snap.run.state == RunStatus::State::failed || snap.run.state == RunStatus::State::finished) {
    ImGui::PushStyleColor(ImGuiCol_Text, snap.run.state == RunStatus::State::failed ? colors::kError : colors::kAllocated);
    ImGui::TextWrapped("%s", snap.run.message.c_str());
    ImGui::PopStyleColor();
  }

  const float line = ImGui::GetTextLineHeight();
  const float w = ImGui::GetContentRegionAvail().x;
  const float rest = ImGui::GetContentRegionAvail().y - 2 * (line + 6);
  const float h = std::max(3 * line, rest * 0.5f - 4);
  float lo = 0, hi = 1;
  if (!t.loss.empty()) {
    const auto [mn, mx] = std::minmax_element(t.loss.begin(), t.loss.end());
    lo = 0;
    hi = std::max(*mx, *mn + 1e-3f);
  }
  std::snprintf(buf, sizeof buf, "loss (%lld step%s/point)", static_cast<long long>(t.stride), t.stride == 1 ? "" : "s");
  curve(buf, t.loss, ImVec2(w, h), colors::kLoss, lo, hi, "%.4f");
  curve("training accuracy (batch)", t.accuracy, ImVec2(w, h), colors::kAccuracy, 0.0f, 1.0f, "%.3f");

  // Mixed precision and accumulation.
  if (t.loss_scale > 0)
    ImGui::Text("loss scale 2^%.0f   skipped steps %lld", std::log2(t.loss_scale), static_cast<long long>(t.skipped_steps));
  else
    ImGui::TextDisabled("loss scale: no GradScaler in this run (fp32)");
  if (t.accumulation > 1)
    ImGui::Text("micro-step %d of %d (gradients accumulate; the optimizer steps on the last)", t.micro_step, t.accumulation);
  else
    ImGui::TextDisabled("accumulation: one micro-batch per optimizer step");
}

}  // namespace furnace::viz
