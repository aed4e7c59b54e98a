// draw_run_banner: see run_banner.h.
#include "run_banner.h"

#include <cstdio>
#include <string>

#include <imgui.h>

#include "lang.h"   // defines: tr
#include "theme.h"  // defines: colors::*
#include "wrapped_label.h"  // defines: wrapped_label

namespace furnace::viz {
namespace {

void wrapped(ImU32 color, const std::string& text) { wrapped_label(color, text); }

}  // namespace

bool draw_run_banner(const AppState& app, const Snapshot& snap) {
  const bool zh = app.lesson.zh;
  const RunStatus& run = snap.run;
  const lesson::Step* step = app.open[static_cast<int>(PanelId::lesson)] ? snap.lesson.current_step() : nullptr;
  const bool started = run.state != RunStatus::State::idle;
  const bool no_events = snap.steps.empty() && snap.training.global_step == 0;
  char buf[256];
  if (step && snap.lesson.awaiting_answer() && (!started || run.lesson_step != step->id)) {
    wrapped(colors::kWarning, tr(zh, "This step's run starts with \"Run and check\": predict first.",
                                 "这一步的运行在点“运行并检查”后开始：先做预测。"));
    return true;
  }
  if (run.state == RunStatus::State::loading) {
    wrapped(colors::kWarning, tr(zh, "Loading the dataset (Fashion-MNIST): the first step follows in a moment.",
                                 "正在加载数据集（Fashion-MNIST），马上开始第一步。"));
    return no_events;
  }
  if (step && started && run.lesson_step == step->id) {
    if (run.held)
      std::snprintf(buf, sizeof buf, tr(zh, "Lesson step %d's own run, held after its %lld steps (tensors kept).",
                                        "课程第 %d 步自己的运行：跑完 %lld 步后停住（张量还在）。"),
                    snap.lesson.step + 1, static_cast<long long>(snap.training.global_step));
    else
      std::snprintf(buf, sizeof buf, tr(zh, "Lesson step %d's own run.", "课程第 %d 步自己的运行。"),
                    snap.lesson.step + 1);
    wrapped(colors::kAccuracy, buf);
    return false;
  }
  if (step) {
    wrapped(colors::kTextDim, started ? tr(zh, "Live run: not the lesson step's (its figures are in the Lesson panel).",
                                           "实时运行：不是这一课程步骤的（步骤的数字在课程面板里）。")
                                      : tr(zh, "No live run: this step trains nothing.", "没有实时运行：这一步不训练。"));
    return !started;
  }
  if (!started) {
    wrapped(colors::kTextDim, tr(zh, "No run yet: Run > Restart starts one.", "还没有运行：点 运行 > 重新开始。"));
    return true;
  }
  return false;
}

}  // namespace furnace::viz
