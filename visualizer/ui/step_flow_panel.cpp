// StepFlowPanel: one training step, stage by stage, as the trace's phase events describe it: the
// batch going to the device(s) (h2d, or scatter in chunks), parameters broadcast from
// device_ids[0] (replicate), forward on each device, outputs flowing to output_device (gather),
// the loss, backward, gradients summed into device_ids[0] (reduce), the optimizer step and the
// scaler's check. Under DistributedDataParallel every GPU is a rank with its own model and its
// share of the batch: its own forward, loss and backward, the gradient buckets filling, each
// bucket's ring all-reduce (step_flow_ddp.h), its own optimizer step. Each stage is a quick
// transition followed by a pause; the strip at the bottom shows the stages to scale with their
// modelled (or measured) durations, DDP's all-reduces as thin bars under backward.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "lang.h"    // defines: tr
#include "panels.h"  // defines: the panel structs, Ui, human_bytes, short_gpu_name
#include "run_banner.h"  // defines: draw_run_banner
#include "step_flow_ddp.h"  // defines: GpuRow, draw_ddp_*, ddp_summary
#include "text_fit.h"   // defines: text_in_box
#include "theme.h"   // defines: colors::*, stage_color, with_alpha
#include "wrapped_label.h"  // defines: wrapped_label

namespace furnace::viz {
namespace {

ImVec2 lerp(ImVec2 a, ImVec2 b, float t) { return ImVec2(a.x + (b.x - a.x) * t, a.y + (b.y - a.y) * t); }

void token(ImDrawList* dl, ImVec2 c, ImU32 col, const char* label, float w = 0, float h = 18) {
  const ImVec2 s = ImGui::CalcTextSize(label);
  if (w <= 0) w = s.x + 10;
  const ImVec2 a(c.x - w * 0.5f, c.y - h * 0.5f), b(c.x + w * 0.5f, c.y + h * 0.5f);
  dl->AddRectFilled(a, b, col, 3);
  text_in_box(dl, ImVec2(std::max(a.x + 2, c.x - s.x * 0.5f), c.y - s.y * 0.5f), w - 4, colors::rgb(20, 20, 24), label);
}

// Rows of Fashion-MNIST images in a copy of `bytes`: 784 fp32 pixels a row, with an int32 label
// when the labels travel along (h2d on one device); 0 when the copy is something else.
int64_t rows_of(uint64_t bytes) {
  for (uint64_t row : {784u * 4u, 784u * 4u + 4u})
    if (bytes > 0 && bytes % row == 0) return static_cast<int64_t>(bytes / row);
  return 0;
}

}  // namespace

void StepFlowPanel::update(const Snapshot& snap, float dt) {
  auto show = [&](const StepPhases& step) {
    shown = step;
    stages = build_stages(shown);
    player.restart(shown.step);
    period_s = 0;
    for (const StepPhases& s : snap.steps)
      if (s.step + 1 == shown.step) period_s = step_period(s, shown);
  };
  if (snap.run.generation != generation) {  // a new run: start over
    generation = snap.run.generation;
    shown = StepPhases{};
    stages.clear();
    player.restart(-1);
    hold_misses = 0;
    hold_missed_step = -1;
  }
  const StepPhases* newest = newest_step(snap.steps);
  if (!newest) return;
  if (shown.spans.empty()) {
    // A run held after its steps (a lesson's) is not going on: its first step is all there is.
    const bool going = snap.run.state == RunStatus::State::running && !snap.run.held;
    if (!worth_showing_first(*newest, going)) return;
    show(*newest);
  }
  if (!hold_stage.empty()) {  // --stage: jump there and pause mid-flight (screenshots, lessons)
    if (shown.step != newest->step) show(*newest);
    for (size_t i = 0; i < stages.size(); ++i)
      if (hold_stage == stages[i].name) {
        player.jump(static_cast<int>(i));
        player.playing = false;
        player.once = false;
        player.t = StepFlowPlayer::kTransition * hold_progress;
        hold_stage.clear();
        return;
      }
    // Not in this step: a phase the run does not have (every step has the same ones), unless the
    // step was caught before all of it arrived (DDP's all-reduces). A few steps on, play on.
    if (shown.step != hold_missed_step) {
      hold_missed_step = shown.step;
      if (++hold_misses >= kHoldTries) hold_stage.clear();
    }
    return;
  }
  if (player.advance(dt, static_cast<int>(stages.size())) && player.follow && newest->step != shown.step)
    show(*newest);
}

void StepFlowPanel::draw_frame(AppState& app, const Snapshot& snap) {
  const bool zh = app.lesson.zh;
  if (draw_run_banner(app, snap)) return;
  // ---- playback controls ----------------------------------------------------------------
  if (ImGui::Button(player.playing ? tr(zh, "Pause###play", "暂停###play") : tr(zh, "Play###play", "播放###play"))) {
    player.playing = !player.playing;
    player.once = false;
  }
  ImGui::SameLine();
  if (ImGui::Button(tr(zh, "Step###step", "单步###step"))) player.step_phase(static_cast<int>(stages.size()));
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tr(zh, "play the next phase, then pause", "播放下一阶段，然后暂停"));
  ImGui::SameLine();
  ImGui::SetNextItemWidth(90);
  ImGui::SliderFloat(tr(zh, "speed###speed", "速度###speed"), &player.speed, 0.1f, 4.0f, "%.1fx", ImGuiSliderFlags_Logarithmic);
  ImGui::SameLine();
  ImGui::Checkbox(tr(zh, "follow###follow", "跟随###follow"), &player.follow);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", tr(zh, "after the last phase, move on to the newest step", "播完最后一个阶段后，跳到最新的一步"));
  const StepPhases* step = shown.spans.empty() ? nullptr : &shown;
  char buf[512];
  // Which step this is, in the status line's count (optimizer steps from 1) against the newest.
  if (step)
    std::snprintf(buf, sizeof buf, tr(zh, "step %lld of %lld", "第 %lld 步（共 %lld）"),
                  static_cast<long long>(step->step + 1), static_cast<long long>(snap.training.global_step));
  else if (snap.run.state == RunStatus::State::failed)  // nothing is coming: the reason is in Training
    std::snprintf(buf, sizeof buf, "%s", tr(zh, "the run failed before its first step (Training says why)",
                                            "运行在第一步之前就失败了（原因见“训练”面板）"));
  else
    std::snprintf(buf, sizeof buf, "%s", tr(zh, "waiting for the first step", "等待第一步"));
  ImGui::SameLine();
  if (ImGui::CalcTextSize(buf).x > ImGui::GetContentRegionAvail().x) ImGui::NewLine();
  ImGui::TextDisabled("%s", buf);
  if (!step || stages.empty()) return;

  const int cur = std::clamp(player.stage, 0, static_cast<int>(stages.size()) - 1);
  const Stage& st = stages[static_cast<size_t>(cur)];
  const float p = player.transition();
  const FlowMode mode = flow_mode(snap.run.parallel);
  const DdpStepFigures ddp = mode == FlowMode::ddp ? ddp_step_figures(*step, snap.run.hidden, snap.run.bucket_cap_mb)
                                                   : DdpStepFigures{};
  double step_total = 0;
  for (const Stage& s : stages) step_total += s.overlapped ? 0.0 : s.dur;
  if (st.kind == StageKind::all_reduce)
    std::snprintf(buf, sizeof buf, tr(zh, "all_reduce, bucket %d of %zu", "all_reduce，第 %d 个桶（共 %zu 个）"), st.repeat,
                  ddp.buckets.size());
  else if (st.repeat > 1)
    std::snprintf(buf, sizeof buf, tr(zh, "%s (micro-step %d)", "%s（第 %d 个微批次）"), stage_name(st.name, zh), st.repeat);
  else
    std::snprintf(buf, sizeof buf, "%s", stage_name(st.name, zh));
  ImGui::PushStyleColor(ImGuiCol_Text, stage_color(st.kind));
  ImGui::TextUnformatted(buf);
  ImGui::PopStyleColor();
  ImGui::SameLine();
  if (st.overlapped)  // on the communication stream, inside backward's time
    std::snprintf(buf, sizeof buf, tr(zh, "%s  (%s on the comm stream, %s)", "%s（comm 流上 %s，%s）"),
                  stage_caption(st.kind, mode, zh), human_seconds(st.dur).c_str(), mebibytes(st.spans.empty() ? 0 : st.spans[0].copy_bytes).c_str());
  else if (mode == FlowMode::ddp && st.kind == StageKind::backward && ddp.exposed_s > 0 &&
           st.repeat == std::max(1, snap.run.accumulation))
    // DDP's backward ends by waiting for the all-reduces (Reducer::finalize_backward): its span
    // is not all compute, and where the all-reduce is long, most of it is that wait. Only the
    // synchronising micro-step waits: under no_sync() the others all-reduce nothing.
    std::snprintf(buf, sizeof buf, tr(zh, "%s  (%s, %.0f%% of the step, of which %s waiting for the all-reduce)",
                                      "%s（%s，占这一步的 %.0f%%，其中 %s 在等 all-reduce）"),
                  stage_caption(st.kind, mode, zh), human_seconds(st.dur).c_str(),
                  step_total > 0 ? 100.0 * st.dur / step_total : 0.0, human_seconds(ddp.exposed_s).c_str());
  else
    std::snprintf(buf, sizeof buf, tr(zh, "%s  (%s, %.0f%% of the step)", "%s（%s，占这一步的 %.0f%%）"),
                  stage_caption(st.kind, mode, zh), human_seconds(st.dur).c_str(),
                  step_total > 0 ? 100.0 * st.dur / step_total : 0.0);
  wrapped_label(colors::kTextDim, buf);
  if (snap.run.amp == "fp16" || snap.run.amp == "bf16") {
    std::snprintf(buf, sizeof buf, tr(zh, "autocast %s: activations and the GEMMs are %s; weights and gradients fp32",
                                      "autocast %s：激活值和矩阵乘是 %s；权重和梯度是 fp32"),
                  snap.run.amp.c_str(), snap.run.amp.c_str());
    wrapped_label(colors::kPeak, buf);
  }

  // ---- the diagram ------------------------------------------------------------------------
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float line = ImGui::GetTextLineHeight();
  const float width = std::max(avail.x, 120.0f);
  const int n = static_cast<int>(step_devices(*step).size());
  const float gap = 10;
  const float box_w = std::min(190.0f, (width - gap * static_cast<float>(n - 1)) / static_cast<float>(std::max(n, 1)));
  const float pad = box_w < 70 ? 3.0f : 6.0f;
  // The line under the strip: DDP's figures, or the step's time (and "[0]" where a narrow box
  // abbreviates device_ids[0]). The strip and that line get their height; the diagram the rest.
  const bool hub_abbreviated = mode != FlowMode::ddp && n > 1 && ImGui::CalcTextSize("device_ids[0]").x > box_w - 2 * pad;
  std::string footer;
  if (mode == FlowMode::ddp && !ddp.buckets.empty()) {
    footer = ddp_summary(ddp, step_total, zh);
  } else {
    const char* abbreviation = hub_abbreviated ? tr(zh, "; [0] = device_ids[0]", "；[0] = device_ids[0]") : "";
    // Where devices wait inside stages, the stages add up to more than the step (step_period).
    if (period_s > 0 && step_total > period_s * 1.02)
      std::snprintf(buf, sizeof buf,
                    tr(zh, "one step = %s of modelled device time, end to end; the stages, each as long as its slowest device, "
                           "add up to %s: devices wait inside them for one another; widths to scale%s",
                       "一步 = 建模设备时间 %s（从上一步结束到这一步结束）；各阶段按最慢的那块卡算，加起来是 %s："
                       "卡在阶段里互相等待；宽度按比例%s"),
                    human_seconds(period_s).c_str(), human_seconds(step_total).c_str(), abbreviation);
    else
      std::snprintf(buf, sizeof buf, tr(zh, "one step = %s of modelled device time; widths to scale%s",
                                        "一步 = 建模设备时间 %s；宽度按比例%s"), human_seconds(step_total).c_str(), abbreviation);
    footer = buf;
  }
  const float spacing = ImGui::GetStyle().ItemSpacing.y;
  const float strip_h = line + 8 + 2 * spacing + wrapped_label_height(footer);
  const float height = std::max(avail.y - strip_h, 7 * line);
  const std::vector<int> devices = step_devices(*step);
  const int hub = hub_device(*step);
  const float box_h = std::clamp(height * 0.42f, 2 * line + 10, 4 * line + 14);
  const float row_w = box_w * static_cast<float>(n) + gap * static_cast<float>(n - 1);
  const float x0 = origin.x + (width - row_w) * 0.5f;
  const float dev_y = origin.y + height - box_h - (mode == FlowMode::ddp ? 14.0f : 4.0f);  // DDP: room for the ring's return
  const float host_w = std::min(width, std::max(200.0f, width * 0.4f));
  const ImVec2 host_a(origin.x + (width - host_w) * 0.5f, origin.y + 2), host_b(host_a.x + host_w, origin.y + 2 + 2 * line + 6);
  auto dev_index = [&](int device) {
    return static_cast<int>(std::find(devices.begin(), devices.end(), device) - devices.begin());
  };
  // Where a token stops above a device: clear of the box and its labels.
  const float token_h = line + 4;
  auto dev_top = [&](int device) {
    const int i = dev_index(device);
    return ImVec2(x0 + static_cast<float>(i) * (box_w + gap) + box_w * 0.5f, dev_y - token_h * 0.5f - 3);
  };
  const ImVec2 hub_top = dev_top(hub);

  // Host and devices.
  // DDP: the host matters for h2d alone (each rank loads its share); the other stages show the
  // buckets in its place.
  // The legend needs its lines above what the stage draws over the boxes (the ring's chunks, the
  // buckets filling); a short panel leaves it out (the caption names the bucket).
  const float above_boxes = st.kind == StageKind::backward ? static_cast<float>(ddp.buckets.size()) * (token_h * 0.7f + 3) + 4
                                                            : token_h + 6;
  const bool ddp_stage = mode == FlowMode::ddp && st.kind != StageKind::host_to_device && !ddp.buckets.empty();
  const bool ddp_legend = ddp_stage && origin.y + 2 + static_cast<float>(ddp.buckets.size()) * line <= dev_y - above_boxes;
  if (!ddp_stage) {
    dl->AddRectFilled(host_a, host_b, colors::kHost, 4);
    text_in_box(dl, ImVec2(host_a.x + 6, host_a.y + 3), host_w - 12, colors::kText, tr(zh, "host (CPU)", "主机（CPU）"));
    text_in_box(dl, ImVec2(host_a.x + 6, host_a.y + 3 + line), host_w - 12, colors::kTextDim,
                mode == FlowMode::ddp ? tr(zh, "one process per GPU, each its data share", "每块 GPU 一个进程，各取一份数据")
                                      : tr(zh, "the batch, the training loop", "这一批数据，训练循环"));
  }
  for (int i = 0; i < n; ++i) {
    const int d = devices[static_cast<size_t>(i)];
    const ImVec2 a(x0 + static_cast<float>(i) * (box_w + gap), dev_y), b(a.x + box_w, dev_y + box_h);
    const PhaseSpan* span = nullptr;
    for (const PhaseSpan& s : st.spans)
      if (s.device == d) span = &s;
    dl->AddRectFilled(a, b, colors::kGpuBox, 4);
    dl->AddRect(a, b, span ? stage_color(st.kind) : colors::kGrid, 4, 0, span ? 2.5f : 1.0f);
    const float room = box_w - 2 * pad;
    float y = a.y + 3;
    std::snprintf(buf, sizeof buf, "cuda:%d", d);
    if (ImGui::CalcTextSize(buf).x > room) std::snprintf(buf, sizeof buf, "%d", d);
    text_in_box(dl, ImVec2(a.x + pad, y), room, colors::kText, buf);
    y += line;
    if (mode == FlowMode::ddp && y + line <= b.y) {  // every GPU a process: its rank (= LOCAL_RANK here)
      std::snprintf(buf, sizeof buf, "rank %d", i);
      text_in_box(dl, ImVec2(a.x + pad, y), room, colors::kPeak, buf);
      y += line;
    } else if (d == hub && n > 1 && y + line <= b.y) {  // where the loss is, the weights live and the gradients meet
      const char* hub_label = ImGui::CalcTextSize("device_ids[0]").x <= room ? "device_ids[0]" : "[0]";
      text_in_box(dl, ImVec2(a.x + pad, y), room, colors::kPeak, hub_label);
      y += line;
    }
    if (span && y + line <= b.y) {
      std::snprintf(buf, sizeof buf, "%s", human_seconds(span->dur).c_str());
      text_in_box(dl, ImVec2(a.x + pad, y), room, colors::kTextDim, buf);
      y += line;
    }
    // Compute stages fill a bar in proportion to the device's share of the stage's time.
    if (span && (st.kind == StageKind::forward || st.kind == StageKind::backward || st.kind == StageKind::other ||
                 st.kind == StageKind::optimizer || st.kind == StageKind::loss)) {
      const float share = st.dur > 0 ? static_cast<float>(span->dur / st.dur) : 1.0f;
      dl->AddRectFilled(ImVec2(a.x + 3, b.y - 7), ImVec2(a.x + 3 + (box_w - 6) * share * p, b.y - 3),
                        stage_color(st.kind));
    }
  }

  // The stage's motion: arrows for the paths, tokens moving along them.
  const ImU32 col = stage_color(st.kind);
  const ImU32 path = with_alpha(col, 0.45f);
  auto slot = [&](size_t i, size_t count) {  // where chunk i leaves the host
    const float slice = host_w / static_cast<float>(count);
    return ImVec2(host_a.x + slice * (static_cast<float>(i) + 0.5f), host_b.y);
  };
  const GpuRow row{devices, x0, dev_y, box_w, box_h, gap, token_h};  // for DDP's pictures
  if (ddp_legend)  // the buckets, where the host box stands in other modes
    draw_ddp_bucket_legend(dl, ImVec2(origin.x + 4, origin.y + 2), width - 8, ddp, st.kind == StageKind::all_reduce ? st.repeat - 1 : -1, zh);
  switch (st.kind) {
    case StageKind::all_reduce:
      draw_ddp_ring(dl, row, ddp.world, p, col);
      break;
    case StageKind::host_to_device:
    case StageKind::scatter:
      for (size_t i = 0; i < st.spans.size(); ++i) {  // chunk i leaves its slice of the batch
        const PhaseSpan& s = st.spans[i];
        const int64_t rows = rows_of(s.copy_bytes);
        // DataParallel's h2d carries the labels alone (int32, to output_device).
        const bool labels_only = st.kind == StageKind::host_to_device && n > 1 && s.copy_bytes % 4 == 0 && rows == 0;
        if (labels_only)
          std::snprintf(buf, sizeof buf, tr(zh, "%lld labels", "%lld 个标签"), static_cast<long long>(s.copy_bytes / 4));
        else if (rows > 0)
          std::snprintf(buf, sizeof buf, tr(zh, "%lld rows", "%lld 行"), static_cast<long long>(rows));
        else
          std::snprintf(buf, sizeof buf, "%s", human_bytes(static_cast<double>(s.copy_bytes)).c_str());
        if (ImGui::CalcTextSize(buf).x + 8 > box_w && rows > 0)
          std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(rows));  // narrow: the count alone
        const ImVec2 from = slot(i, st.spans.size()), to = dev_top(s.device);
        draw_arrow(dl, from, ImVec2(to.x, to.y + token_h * 0.5f), path, 1.5f, 6.0f);
        token(dl, lerp(ImVec2(from.x, from.y + token_h * 0.5f + 2), to, p), col, buf,
              std::min(ImGui::CalcTextSize(buf).x + 10, box_w), token_h);
      }
      break;
    case StageKind::replicate:
      for (const PhaseSpan& s : st.spans)
        if (s.device != hub || n == 1) {
          draw_arrow(dl, hub_top, dev_top(s.device), path, 1.5f, 6.0f);
          token(dl, lerp(hub_top, dev_top(s.device), p), col, tr(zh, "weights", "权重"), 0, token_h);
        }
      break;
    case StageKind::gather_backward:
      for (const PhaseSpan& s : st.spans)
        if (s.device != hub) {
          draw_arrow(dl, hub_top, dev_top(s.device), path, 1.5f, 6.0f);
          token(dl, lerp(hub_top, dev_top(s.device), p), col, "∂out", 0, token_h);
        }
      break;
    case StageKind::gather:
      for (const PhaseSpan& s : st.spans)
        if (s.device != hub) {
          draw_arrow(dl, dev_top(s.device), hub_top, path, 1.5f, 6.0f);
          token(dl, lerp(dev_top(s.device), hub_top, p), col, "out", 0, token_h);
        }
      if (n == 1 || st.spans.size() == 1) token(dl, hub_top, col, "out", 0, token_h);
      break;
    case StageKind::reduce:
      for (const PhaseSpan& s : st.spans)
        if (s.device != hub) {
          draw_arrow(dl, dev_top(s.device), hub_top, path, 1.5f, 6.0f);
          token(dl, lerp(dev_top(s.device), hub_top, p), col, "∇W", 0, token_h);
        }
      if (p >= 1.0f) token(dl, hub_top, col, "Σ ∇W", 0, token_h);
      break;
    case StageKind::loss:
      std::snprintf(buf, sizeof buf, "loss %.4f", step->loss);
      if (mode == FlowMode::ddp)  // every rank its own loss; rank 0's is the one printed
        for (const PhaseSpan& s : st.spans)
          if (s.device != hub) token(dl, ImVec2(dev_top(s.device).x, dev_top(s.device).y - 10 * (1 - p)), with_alpha(col, 0.3f + 0.7f * p), "loss", 0, token_h);
      token(dl, ImVec2(hub_top.x, hub_top.y - 10 * (1 - p)), with_alpha(col, 0.3f + 0.7f * p), buf,
            mode == FlowMode::ddp ? std::min(ImGui::CalcTextSize(buf).x + 10, box_w) : 0, token_h);
      break;
    case StageKind::backward:
      if (mode == FlowMode::ddp && !ddp.buckets.empty()) {
        draw_ddp_buckets_filling(dl, row, ddp, p);
        break;
      }
      for (const PhaseSpan& s : st.spans) token(dl, dev_top(s.device), with_alpha(col, p), "∇W", 0, token_h);
      break;
    case StageKind::forward:
      for (const PhaseSpan& s : st.spans) token(dl, dev_top(s.device), with_alpha(col, p), "x→y", 0, token_h);
      break;
    case StageKind::optimizer:
      for (const PhaseSpan& s : st.spans)
        token(dl, dev_top(s.device), with_alpha(col, 1.0f - 0.5f * p), box_w >= 90 ? "W -= lr·v" : "W", 0, token_h);
      break;
    case StageKind::scaler:
      token(dl, hub_top, col, tr(zh, "inf/NaN? skip : step", "有 inf/NaN？跳过：更新"), 0, token_h);
      break;
    case StageKind::other:
      for (const PhaseSpan& s : st.spans) token(dl, dev_top(s.device), with_alpha(col, p), st.name, 0, token_h);
      break;
  }
  ImGui::Dummy(ImVec2(width, height));

  // ---- the stage strip, to scale ----------------------------------------------------------
  double total = 0;
  size_t sequential = 0;
  for (const Stage& s : stages)
    if (!s.overlapped) {
      total += s.dur;
      ++sequential;
    }
  const ImVec2 sa = ImGui::GetCursorScreenPos();
  const float min_w = 6;
  const float usable = width - min_w * static_cast<float>(sequential);
  float x = sa.x;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  float backward_x = sa.x, backward_w = 0;  // the last backward's segment: DDP's all-reduces sit under it
  double backward_start = 0, backward_dur = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& s = stages[i];
    if (s.overlapped) {  // a thin bar under backward, at its real time (rank 0's)
      if (backward_dur <= 0 || s.spans.empty()) continue;
      const double t0 = (s.spans[0].start - backward_start) / backward_dur, t1 = t0 + s.dur / backward_dur;
      const ImVec2 a(backward_x + backward_w * static_cast<float>(std::clamp(t0, 0.0, 1.0)), sa.y + line + 1);
      const ImVec2 b(std::max(a.x + 2, backward_x + backward_w * static_cast<float>(std::clamp(t1, 0.0, 1.0))), sa.y + line + 6);
      const bool current = static_cast<int>(i) == cur;
      dl->AddRectFilled(a, b, with_alpha(stage_color(s.kind), current ? 1.0f : 0.7f));
      if (current) dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, b.y + 1), colors::kText, 1, 0, 1.0f);
      if (mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y) {
        ImGui::SetTooltip(tr(zh, "all_reduce, bucket %d: %s on the comm stream, during backward\nclick to jump here",
                             "all_reduce，第 %d 个桶：comm 流上 %s，与 backward 重叠\n点击跳到这里"),
                          s.repeat, human_seconds(s.dur).c_str());
        if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) player.jump(static_cast<int>(i));
      }
      continue;
    }
    const float w = min_w + (total > 0 ? usable * static_cast<float>(s.dur / total) : usable / static_cast<float>(sequential));
    if (s.kind == StageKind::backward && !s.spans.empty()) {
      backward_x = x;
      backward_w = w - 1;
      backward_start = s.spans[0].start;
      backward_dur = s.spans[0].dur;
    }
    const ImVec2 a(x, sa.y), b(x + w - 1, sa.y + line + 4);
    const bool current = static_cast<int>(i) == cur;
    dl->AddRectFilled(a, b, with_alpha(stage_color(s.kind), current ? 1.0f : 0.45f));
    if (current) dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(b.x + 1, b.y + 1), colors::kText, 2, 0, 1.5f);
    const char* shown_name = stage_name(s.name, zh);
    if (ImGui::CalcTextSize(shown_name).x + 4 < w) text_in_box(dl, ImVec2(a.x + 2, a.y + 2), w - 4, colors::rgb(16, 16, 20), shown_name);
    if (mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y) {
      ImGui::SetTooltip(tr(zh, "%s: %s on %zu device%s (%.0f%% of the step)%s\nclick to jump here",
                           "%s：%s，%zu 个设备%s（占这一步的 %.0f%%）%s\n点击跳到这里"),
                        stage_name(s.name, zh), human_seconds(s.dur).c_str(), s.spans.size(),
                        zh || s.spans.size() == 1 ? "" : "s", total > 0 ? 100.0 * s.dur / total : 0.0,
                        s.bytes ? tr(zh, ", with copies", "，含拷贝") : "");
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) player.jump(static_cast<int>(i));
    }
    x += w;
  }
  ImGui::Dummy(ImVec2(width, line + 8));
  wrapped_label(colors::kTextDim, footer);
}

}  // namespace furnace::viz
