// TrainingPanel: progress, throughput, the loss and training-accuracy curves (decimated to a
// bounded number of points), and the mixed-precision and accumulation state: the loss scale with
// skipped steps under fp16, the micro-step inside an effective batch (pitfalls 12, 13).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "furnace/op_table.h"  // defines: cpu_gemm_kernel
#include "lang.h"    // defines: tr
#include "panels.h"  // defines: the panel structs, Ui, human_bytes, short_gpu_name
#include "run_banner.h"  // defines: draw_run_banner
#include "text_fit.h"   // defines: text_in_box
#include "theme.h"   // defines: colors::*, stage_color, with_alpha
#include "wrapped_label.h"  // defines: wrapped_label

namespace furnace::viz {
namespace {

// A line plot of `v` filling `size`, y from lo to hi: the label and the newest value at the top
// left, the axis's top and bottom at the right (never under the value).
void curve(const char* label, const std::vector<float>& v, ImVec2 size, ImU32 col, float lo, float hi,
           const char* fmt, bool zh) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 a = ImGui::GetCursorScreenPos(), b(a.x + size.x, a.y + size.y);
  dl->AddRect(a, b, colors::kGrid, 3);  // an outline: filled areas cost fill rate in software GL
  for (int g = 1; g < 4; ++g) {
    const float y = a.y + size.y * static_cast<float>(g) / 4.0f;
    dl->AddLine(ImVec2(a.x, y), ImVec2(b.x, y), colors::kGrid);
  }
  char value[64], top[32], bottom[32];
  if (v.size() >= 2 && hi > lo) {
    const float dx = size.x / static_cast<float>(v.size() - 1);
    // One segment per pixel column at most: long series draw as their envelope.
    const size_t step = std::max<size_t>(1, static_cast<size_t>(std::ceil(static_cast<float>(v.size()) / size.x)));
    auto y = [&](float x) { return b.y - 2 - (size.y - 4) * std::clamp((x - lo) / (hi - lo), 0.0f, 1.0f); };
    for (size_t i = step; i < v.size(); i += step)
      dl->AddLine(ImVec2(a.x + dx * static_cast<float>(i - step), y(v[i - step])), ImVec2(a.x + dx * static_cast<float>(i), y(v[i])), col, 1.5f);
    std::snprintf(value, sizeof value, fmt, v.back());
  } else {
    std::snprintf(value, sizeof value, "%s", tr(zh, "waiting for steps", "等待训练步"));
  }
  std::snprintf(top, sizeof top, "%.3g", hi);
  std::snprintf(bottom, sizeof bottom, "%.3g", lo);
  const float line = ImGui::GetTextLineHeight();
  const float axis_w = std::max(ImGui::CalcTextSize(top).x, ImGui::CalcTextSize(bottom).x) + 8;
  const float room = size.x - axis_w - 8;  // left of the axis labels
  const float label_w = ImGui::CalcTextSize(label).x, value_w = ImGui::CalcTextSize(value).x;
  // The texts sit on a backing of the panel's colour: the curve passes under them, not through.
  auto backing = [&](ImVec2 at, float w) {
    dl->AddRectFilled(ImVec2(at.x - 2, at.y), ImVec2(at.x + w + 2, at.y + line), with_alpha(colors::kPanel, 0.85f));
  };
  const bool one_line = label_w + 8 + value_w <= room;
  backing(ImVec2(a.x + 4, a.y + 2), one_line ? label_w + 8 + value_w : std::min(std::max(label_w, value_w), room));
  if (!one_line) backing(ImVec2(a.x + 4, a.y + 2 + line), std::min(value_w, room));
  backing(ImVec2(b.x - ImGui::CalcTextSize(top).x - 4, a.y + 2), ImGui::CalcTextSize(top).x);
  backing(ImVec2(b.x - ImGui::CalcTextSize(bottom).x - 4, b.y - line - 2), ImGui::CalcTextSize(bottom).x);
  if (one_line) {  // "loss  0.4193" on one line
    text_in_box(dl, ImVec2(a.x + 4, a.y + 2), label_w, col, label);
    text_in_box(dl, ImVec2(a.x + 4 + label_w + 8, a.y + 2), value_w, colors::kText, value);
  } else {  // a narrow panel: the value under the label
    text_in_box(dl, ImVec2(a.x + 4, a.y + 2), room, col, label);
    text_in_box(dl, ImVec2(a.x + 4, a.y + 2 + line), room, colors::kText, value);
  }
  dl->AddText(ImVec2(b.x - ImGui::CalcTextSize(top).x - 4, a.y + 2), colors::kTextDim, top);
  dl->AddText(ImVec2(b.x - ImGui::CalcTextSize(bottom).x - 4, b.y - line - 2), colors::kTextDim, bottom);
  ImGui::Dummy(size);
}

// Where the tensors are 16-bit under autocast, and GradScaler's state (fp16 only).
void draw_precision(const Snapshot& snap, bool zh) {
  const TrainingSeries& t = snap.training;
  const std::string& amp = snap.run.amp;
  if (amp != "fp16" && amp != "bf16") {
    ImGui::PushStyleColor(ImGuiCol_Text, colors::kTextDim);
    ImGui::TextWrapped("%s", tr(zh, "dtypes: everything fp32 (no autocast, no GradScaler)",
                                "数据类型：全部 fp32（没有 autocast，也没有 GradScaler）"));
    ImGui::PopStyleColor();
    return;
  }
  ImGui::PushStyleColor(ImGuiCol_Text, colors::kPeak);
  ImGui::TextWrapped(tr(zh, "autocast %s: the Linear layers' activations are %s; weights, gradients, optimizer state and loss fp32",
                        "autocast %s：Linear 层的激活值是 %s；权重、梯度、优化器状态和 loss 是 fp32"),
                     amp.c_str(), amp.c_str());
  ImGui::PopStyleColor();
  if (t.loss_scale > 0)
    ImGui::TextWrapped(tr(zh, "GradScaler: loss scale 2^%.0f, skipped steps %lld", "GradScaler：loss scale 2^%.0f，跳过的步数 %lld"),
                std::log2(t.loss_scale), static_cast<long long>(t.skipped_steps));
  else if (amp == "bf16")
    ImGui::TextWrapped("%s", tr(zh, "no GradScaler: bf16 has fp32's range", "不需要 GradScaler：bf16 的范围和 fp32 一样"));
}

}  // namespace

std::string wall_clock_note(const std::string& backend, bool zh) {
  if (backend == "cuda") return tr(zh, "(wall clock, on the GPU)", "（GPU 上的实际时间）");
  // As `furnace train`'s summary: on the CPU, which OpenBLAS kernel ran the GEMMs (an AVX-512 CPU
  // told OPENBLAS_CORETYPE=Haswell runs them at about half the speed).
  const std::string kernel = cpu_gemm_kernel();
  return zh ? "（本机 CPU 的实际时间，OpenBLAS 的 " + kernel + " 内核）"
            : "(wall clock, this CPU, OpenBLAS's " + kernel + " kernel)";
}

void TrainingPanel::draw_frame(AppState& app, const Snapshot& snap) {
  const bool zh = app.lesson.zh;
  if (draw_run_banner(app, snap)) return;
  const TrainingSeries& t = snap.training;
  char buf[160];
  const float frac = t.total_steps ? static_cast<float>(t.global_step) / static_cast<float>(t.total_steps) : 0.0f;
  // The same counter as the status line: optimizer steps of the run, then the epoch.
  std::snprintf(buf, sizeof buf, tr(zh, "step %lld/%lld  epoch %d/%d", "第 %lld/%lld 步  第 %d/%d 轮"),
                static_cast<long long>(t.global_step), static_cast<long long>(t.total_steps), t.epoch, t.epochs);
  ImGui::ProgressBar(frac, ImVec2(-1, 0), buf);
  std::snprintf(buf, sizeof buf, tr(zh, "%.0f samples/s", "%.0f 样本/秒"), t.samples_per_s);
  ImGui::TextUnformatted(buf);
  const std::string eta = t.total_steps ? format_duration(t.eta_s) : "--:--";
  std::snprintf(buf, sizeof buf, tr(zh, "%s   ETA %s", "%s  剩余 %s"), wall_clock_note(snap.backend, zh).c_str(),
                eta.c_str());
  ImGui::SameLine();
  if (ImGui::CalcTextSize(buf).x > ImGui::GetContentRegionAvail().x)
    std::snprintf(buf, sizeof buf, tr(zh, "ETA %s", "剩余 %s"), eta.c_str());
  if (ImGui::CalcTextSize(buf).x > ImGui::GetContentRegionAvail().x) ImGui::NewLine();
  ImGui::TextDisabled("%s", buf);
  if (snap.run.state == RunStatus::State::failed || snap.run.state == RunStatus::State::finished) {
    wrapped_label(snap.run.state == RunStatus::State::failed ? colors::kError : colors::kAllocated, snap.run.message);
  }

  const float line = ImGui::GetTextLineHeight();
  const float w = ImGui::GetContentRegionAvail().x;
  const float rest = ImGui::GetContentRegionAvail().y - 3 * (line + 6);
  const float h = std::max(3 * line, rest * 0.5f - 4);
  float lo = 0, hi = 1;
  if (!t.loss.empty()) {
    const auto [mn, mx] = std::minmax_element(t.loss.begin(), t.loss.end());
    lo = 0;
    hi = std::max(*mx, *mn + 1e-3f);
  }
  if (t.stride == 1)
    std::snprintf(buf, sizeof buf, "%s", tr(zh, "loss", "loss"));
  else
    std::snprintf(buf, sizeof buf, tr(zh, "loss (%lld steps/point)", "loss（每点 %lld 步）"), static_cast<long long>(t.stride));
  curve(buf, t.loss, ImVec2(w, h), colors::kLoss, lo, hi, "%.4f", zh);
  curve(tr(zh, "training accuracy", "训练准确率"), t.accuracy, ImVec2(w, h), colors::kAccuracy, 0.0f, 1.0f, "%.3f", zh);

  // Mixed precision and accumulation.
  draw_precision(snap, zh);
  if (t.accumulation > 1)
    ImGui::TextWrapped(tr(zh, "micro-step %d of %d (gradients accumulate; the optimizer steps on the last)",
                          "第 %d/%d 个微批次（梯度累加，最后一个之后优化器才更新）"),
                       t.micro_step, t.accumulation);
  else
    ImGui::TextDisabled("%s", tr(zh, "accumulation: none", "梯度累积：无"));
}

}  // namespace furnace::viz
