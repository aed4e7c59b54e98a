// ControlsPanel: the scenario's knobs (machine, backend, parallel mode, device_ids, batch,
// output_device, accumulation, mixed precision, learning rate, model) and the training-thread
// delay. A committed change restarts the scenario in a new process. Beside a lesson the panel is
// narrow: labels above their fields, two knobs to a line, the model's knobs (hidden layers,
// learning rate, epochs) behind a header closed at first, so that the rest is in view unscrolled.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>
#include <cstdio>

#include <imgui.h>
#include <imgui_stdlib.h>  // defines: ImGui::InputText for std::string

#include "lang.h"    // defines: tr
#include "panels.h"  // defines: the panel structs, Ui, human_bytes, short_gpu_name
#include "text_fit.h"  // defines: check_fit
#include "theme.h"   // defines: colors::*, stage_color, with_alpha
#include "wrapped_label.h"  // defines: wrapped_label

namespace furnace::viz {
namespace {

bool combo(const char* label, std::string& value, const std::vector<std::string>& items) {
  bool changed = false;
  check_fit(value.c_str(), ImGui::CalcItemWidth() - ImGui::GetFrameHeight() - 2 * ImGui::GetStyle().FramePadding.x);
  if (ImGui::BeginCombo(label, value.c_str())) {
    for (const std::string& it : items) {
      if (ImGui::Selectable(it.c_str(), it == value) && it != value) {
        value = it;
        changed = true;
      }
    }
    ImGui::EndCombo();
  }
  return changed;
}

// Where the knobs go. A wide panel puts each label right of its field, `field` px wide; a narrow
// one (beside a lesson) puts each label above its field, which takes the whole width, or half of
// it for two knobs on a line. Each knob is drawn by `draw(id)`, its widget under that id.
class KnobLayout {
 public:
  KnobLayout(float field, bool stacked) : field_(field), stacked_(stacked) {}
  bool stacked() const { return stacked_; }

  template <class Draw>
  void one(const char* label, Draw&& draw) const {
    knob(label, stacked_ ? ImGui::GetContentRegionAvail().x : field_, draw);
  }
  // Side by side when stacked and each half keeps a usable field (an InputInt's - and + buttons
  // and a few digits), else one after the other.
  template <class DrawA, class DrawB>
  void two(const char* label_a, DrawA&& a, const char* label_b, DrawB&& b) const {
    const float half = std::floor((ImGui::GetContentRegionAvail().x - ImGui::GetStyle().ItemSpacing.x) * 0.5f);
    if (!stacked_ || half < 100) {
      one(label_a, a);
      one(label_b, b);
      return;
    }
    knob(label_a, half, a);
    ImGui::SameLine();
    knob(label_b, half, b);
  }

 private:
  template <class Draw>
  void knob(const char* label, float width, Draw& draw) const {
    if (!stacked_) {
      ImGui::SetNextItemWidth(width);
      draw(label);
      return;
    }
    const std::string shown(label, std::strcspn(label, "#"));
    const std::string id = "##" + std::string(label);  // "##machine###machine": the same id as unstacked
    ImGui::BeginGroup();
    check_fit(shown.c_str(), width);
    // The label close above its own field, the usual gap above the next label.
    ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, ImVec2(ImGui::GetStyle().ItemSpacing.x, 1));
    ImGui::TextDisabled("%s", shown.c_str());
    ImGui::PopStyleVar();
    ImGui::SetNextItemWidth(width);
    draw(id.c_str());
    ImGui::EndGroup();
  }

  float field_;
  bool stacked_;
};

}  // namespace

void ControlsPanel::draw_frame(AppState& app, const Snapshot& snap) {
  ControlsState& c = app.controls;
  Scenario& sc = c.scenario;
  bool restart = false;
  // Whether the output_device field's current edit changed the value (only then does it restart).
  static bool edited_output_device = false;
  const bool zh = app.lesson.zh;
  enum Knob { kMachine, kBackend, kParallel, kDeviceIds, kOutputDevice, kDevice, kBatch, kAccum, kAmp, kLr, kHidden, kEpochs, kDelay };
  const char* labels[] = {tr(zh, "machine###machine", "机器###machine"), tr(zh, "backend###backend", "后端###backend"),
                          tr(zh, "parallel###parallel", "并行###parallel"), "device_ids", "output_device",
                          tr(zh, "device (cuda:N)###device", "设备 (cuda:N)###device"), "batch",
                          tr(zh, "accumulation###accum", "梯度累积###accum"), "amp",
                          tr(zh, "learning rate###lr", "学习率###lr"), tr(zh, "hidden layers###hidden", "隐藏层###hidden"),
                          tr(zh, "epochs###epochs", "轮数###epochs"), tr(zh, "step delay###delay", "每步延时###delay")};
  // Labels right of the fields: the fields take what the widest label leaves.
  float label_w = 0;
  for (const char* l : labels) label_w = std::max(label_w, ImGui::CalcTextSize(l, nullptr, true).x);
  const ImGuiStyle& style = ImGui::GetStyle();
  const float field = std::max(60.0f, ImGui::GetContentRegionAvail().x - label_w - style.ItemInnerSpacing.x - 2);
  // A narrow panel (beside a lesson) stacks them: "workstation-4x3090" is not cut to "workstation-4".
  const KnobLayout knobs(field, field < ImGui::CalcTextSize("workstation-4x3090").x + ImGui::GetFrameHeight() +
                                            2 * style.FramePadding.x);
  // An edit committed in a text or number field restarts the run.
  auto committed = [&] { restart |= ImGui::IsItemDeactivatedAfterEdit(); };

  knobs.one(labels[kMachine], [&](const char* id) { restart |= combo(id, sc.topology, c.topologies); });
  const bool dp = c.parallel == "dp";
  const bool ddp = c.parallel == "ddp";
  knobs.two(
      labels[kBackend], [&](const char* id) { restart |= combo(id, sc.backend, c.backends); },
      labels[kDevice], [&](const char* id) {
        ImGui::BeginDisabled(dp || ddp);
        int device = sc.device;
        if (ImGui::InputInt(id, &device, 1, 1)) sc.device = std::max(0, device);
        committed();
        ImGui::EndDisabled();
        if (dp && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
          ImGui::SetTooltip("%s", tr(zh, "with DataParallel the model is built on device_ids[0]", "用 DataParallel 时模型建在 device_ids[0] 上"));
        if (ddp && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
          ImGui::SetTooltip("%s", tr(zh, "with DDP rank r trains on cuda:r (its LOCAL_RANK)", "用 DDP 时 rank r 在 cuda:r 上训练（它的 LOCAL_RANK）"));
      });

  // none / DataParallel / DistributedDataParallel: a change restarts the run in that mode.
  knobs.one(labels[kParallel], [&](const char* id) {
    int mode = dp ? 1 : ddp ? 2 : 0;
    const char* modes[] = {tr(zh, "single device", "单卡"), "DataParallel", "DistributedDataParallel"};
    check_fit(modes[mode], ImGui::CalcItemWidth() - ImGui::GetFrameHeight() - 2 * style.FramePadding.x);
    if (ImGui::Combo(id, &mode, modes, 3)) {
      c.parallel = mode == 1 ? "dp" : mode == 2 ? "ddp" : "none";
      restart = true;
    }
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip("%s", tr(zh, "dp: one process, the model replicated from device_ids[0] every step;\n"
                                     "ddp: torchrun's one process per GPU, each its own model, gradients all-reduced",
                                 "dp：一个进程，每一步从 device_ids[0] 复制模型；\n"
                                 "ddp：像 torchrun 那样每块 GPU 一个进程，各有一份模型，梯度 all-reduce"));
  });
  ImGui::BeginDisabled(!dp);
  knobs.two(
      labels[kDeviceIds], [&](const char* id) {
        if (ImGui::InputTextWithHint(id, tr(zh, "all visible", "全部可见"), &c.device_ids)) c.keep_device = false;
        committed();
        if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
          ImGui::SetTooltip("%s", tr(zh, "nn.DataParallel(model, device_ids=[...]): cuda ordinals inside the process,\n"
                                         "comma-separated; empty: every visible device. The model lives on device_ids[0].",
                                     "nn.DataParallel(model, device_ids=[...])：进程内的 cuda 序号，逗号分隔；\n"
                                     "空：所有可见设备。模型在 device_ids[0] 上。"));
      },
      labels[kOutputDevice], [&](const char* id) {
        // Empty for PyTorch's default (None: device_ids[0]), not -1, which PyTorch's gather
        // reads as the CPU.
        std::string out = c.output_device >= 0 ? std::to_string(c.output_device) : std::string();
        const int before = c.output_device;
        if (ImGui::InputTextWithHint(id, "device_ids[0]", &out, ImGuiInputTextFlags_CharsDecimal)) {
          if (out.empty())
            c.output_device = -1;
          else if (out.size() <= 4 && out.find_first_not_of("0123456789") == std::string::npos)
            c.output_device = std::stoi(out);
        }
        if (c.output_device != before) edited_output_device = true;
        // A committed edit restarts the run only if it changed the value ('-' or '.' are ignored).
        if (ImGui::IsItemDeactivatedAfterEdit() && edited_output_device) {
          restart = true;
          edited_output_device = false;
        }
        if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
          ImGui::SetTooltip("%s", tr(zh, "where gather puts the outputs and the loss is computed, a cuda ordinal;\n"
                                         "empty: device_ids[0] (PyTorch's output_device=None)",
                                     "gather 把输出放到哪里、在哪里算 loss，填 cuda 序号；\n"
                                     "空：device_ids[0]（PyTorch 的 output_device=None）"));
      });
  ImGui::EndDisabled();

  knobs.two(
      labels[kBatch], [&](const char* id) {
        int batch = static_cast<int>(sc.batch);
        if (ImGui::InputInt(id, &batch, 32, 256)) sc.batch = std::max(1, batch);
        committed();
      },
      labels[kAccum], [&](const char* id) {
        int accum = sc.accum;
        if (ImGui::InputInt(id, &accum, 1, 1)) sc.accum = std::clamp(accum, 1, 1024);
        committed();
        if (ImGui::IsItemHovered())
          ImGui::SetTooltip("%s", tr(zh, "micro-batches per optimizer step; each micro-batch's loss is divided by this\n"
                                         "(the division the article's snippet leaves out)",
                                     "每次更新参数的小 batch 数；每个小 batch 的 loss 都除以它\n（文章的代码片段漏掉了这个除法）"));
      });
  knobs.two(
      labels[kAmp], [&](const char* id) {
        int amp = sc.amp == "fp16" ? 1 : sc.amp == "bf16" ? 2 : 0;
        const char* amps[] = {"off", "fp16", "bf16"};
        if (ImGui::Combo(id, &amp, amps, 3)) {
          sc.amp = amps[amp];
          restart = true;
        }
        if (ImGui::IsItemHovered())
          ImGui::SetTooltip("%s", tr(zh, "autocast dtype: fp16 runs with a GradScaler (loss scale, skipped steps);\n"
                                         "bf16 has fp32's range and needs none",
                                     "autocast 的精度：fp16 要配 GradScaler（loss 缩放、跳过的步）；\nbf16 的范围和 fp32 一样，不需要"));
      },
      labels[kDelay], [&](const char* id) {
        ImGui::SliderFloat(id, &c.step_delay_ms, 0.0f, 500.0f, "%.0f ms", ImGuiSliderFlags_Logarithmic);
        if (ImGui::IsItemHovered())
          ImGui::SetTooltip("%s", tr(zh, "the training thread sleeps this long after each step, so the animation can be\n"
                                         "followed (0: full speed); applies at once, no restart",
                                     "训练线程每步之后睡这么久，好让动画看得清（0：全速）；\n立即生效，不用重新开始"));
      });

  // The model and its schedule, which the lessons seldom change: behind a header, closed at
  // first, where the knobs are stacked (beside a lesson every other knob is then in view).
  if (!knobs.stacked() || ImGui::CollapsingHeader(tr(zh, "model: layers, lr, epochs###model", "模型：隐藏层、学习率、轮数###model"))) {
    knobs.two(
        labels[kHidden], [&](const char* id) {
          ImGui::InputText(id, &c.hidden);
          committed();
        },
        labels[kLr], [&](const char* id) {
          ImGui::InputFloat(id, &sc.lr, 0.01f, 0.1f, "%.4f");
          committed();
        });
    knobs.one(labels[kEpochs], [&](const char* id) {
      ImGui::InputInt(id, &sc.epochs);
      sc.epochs = std::max(1, sc.epochs);
      committed();
    });
  }

  if (ImGui::Button(tr(zh, "Restart###restart", "重新开始###restart"))) restart = true;
  ImGui::SameLine();
  if (ImGui::Button(tr(zh, "Stop###stop", "停止###stop"))) app.stop_requested = true;
  const char* fresh = tr(zh, "New process###new", "新进程###new");
  // On the same line only when it fits (a narrow panel beside a lesson).
  const float right_edge = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  if (right_edge - ImGui::GetItemRectMax().x >
      ImGui::CalcTextSize(fresh, nullptr, true).x + 2 * style.FramePadding.x + style.ItemSpacing.x)
    ImGui::SameLine();
  if (ImGui::Button(fresh)) app.new_process_requested = true;
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", tr(zh, "a fresh process that has not initialised CUDA: CUDA_VISIBLE_DEVICES edits apply\n"
                                   "until the next Restart trains (the first device use)",
                               "一个还没初始化 CUDA 的新进程：在下一次“重新开始”训练（第一次使用设备）之前，\n"
                               "对 CUDA_VISIBLE_DEVICES 的修改都有效"));
  if (restart) app.restart_requested = true;

  if (!c.error.empty()) wrapped_label(colors::kError, c.error);
  wrapped_label(colors::kTextDim, zh && !snap.run.scenario_zh.empty() ? snap.run.scenario_zh : snap.run.scenario);
}

}  // namespace furnace::viz
