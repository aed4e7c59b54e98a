// Ui: the menu bar with the run's status, the window layout, and the panel calls; plus the small
// formatting helpers the panels share. Panel names and titles live here too.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "lang.h"    // defines: tr
#include "panels.h"  // defines: the panel structs, Ui, human_bytes, short_gpu_name
#include "theme.h"   // defines: colors::*, stage_color, with_alpha

namespace furnace::viz {

const char* panel_name(PanelId id) {
  switch (id) {
    case PanelId::devices: return "devices";
    case PanelId::step_flow: return "flow";
    case PanelId::memory: return "memory";
    case PanelId::training: return "training";
    case PanelId::timeline: return "timeline";
    case PanelId::controls: return "controls";
    case PanelId::lesson: return "lesson";
  }
  return "?";
}

const char* panel_title(PanelId id, bool zh) {
  // "###name": the window keeps its place and size when the language changes.
  switch (id) {
    case PanelId::devices: return zh ? "设备###devices" : "Devices 设备###devices";
    case PanelId::step_flow: return zh ? "单步流程：一个训练步###flow" : "Step flow 单步流程###flow";
    case PanelId::memory: return zh ? "显存###memory" : "Memory 显存###memory";
    case PanelId::training: return zh ? "训练###training" : "Training 训练###training";
    case PanelId::timeline: return zh ? "时间线###timeline" : "Timeline 时间线###timeline";
    case PanelId::controls: return zh ? "控制###controls" : "Controls 控制###controls";
    case PanelId::lesson: return zh ? "课程###lesson" : "Lesson 课程###lesson";
  }
  return "?";
}

std::string panel_display_name(PanelId id, bool zh) {
  const std::string title = panel_title(id, zh);
  return title.substr(0, title.find("###"));
}

std::optional<PanelId> parse_panel(std::string_view name) {
  for (int i = 0; i < kPanelCount; ++i)
    if (name == panel_name(static_cast<PanelId>(i))) return static_cast<PanelId>(i);
  if (name == "step_flow") return PanelId::step_flow;  // lesson files' key for it
  return std::nullopt;
}

std::string human_bytes(double b) {
  char buf[32];
  const double a = std::fabs(b);
  if (a >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  else if (a >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024));
  else if (a >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string human_seconds(double s) {
  char buf[32];
  if (std::abs(s) < 5e-8) s = 0;  // a tick a rounding error left of zero reads 0.0 us, not -0.0 us
  if (s >= 1.0)
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

std::string axis_seconds(double t, double tick, double largest) {
  double unit = 1e-6;
  const char* name = "us";
  if (largest >= 1.0) {
    unit = 1.0;
    name = "s";
  } else if (largest >= 1e-3) {
    unit = 1e-3;
    name = "ms";
  }
  // Ticks are 1, 2 or 5 times a power of ten: that power's decimals, none for a whole unit.
  const double step = tick / unit;
  const int decimals = step >= 1 ? 0 : std::min(9, static_cast<int>(std::ceil(-std::log10(step) - 1e-9)));
  double v = t / unit;
  if (std::abs(v) < step * 1e-6) v = 0;  // a tick a rounding error left of zero reads 0, not -0
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f %s", decimals, v, name);
  return buf;
}

std::string short_gpu_name(const std::string& name) {
  std::string s = name;
  for (const char* prefix : {"NVIDIA ", "GeForce "})
    if (s.rfind(prefix, 0) == 0) s.erase(0, std::char_traits<char>::length(prefix));
  return s;
}

void draw_arrow(ImDrawList* dl, ImVec2 from, ImVec2 to, ImU32 col, float thickness, float head) {
  dl->AddLine(from, to, col, thickness);
  const float dx = to.x - from.x, dy = to.y - from.y;
  const float len = std::sqrt(dx * dx + dy * dy);
  if (len < 1) return;
  const float ux = dx / len, uy = dy / len, s = head;
  dl->AddTriangleFilled(to, ImVec2(to.x - ux * s * 1.6f - uy * s, to.y - uy * s * 1.6f + ux * s),
                        ImVec2(to.x - ux * s * 1.6f + uy * s, to.y - uy * s * 1.6f - ux * s), col);
}

namespace {

struct Rect {
  float x, y, w, h;
};

// The default tiling for a display of `size` below a menu bar of height `top` (fractions of the
// width and height; see the [SECTION] list in panels.h for what each panel shows).
Rect default_rect(PanelId id, ImVec2 size, float top, bool lesson_open) {
  // With a lesson open, it takes a column on the right and the others tile the rest.
  const float lesson_w = lesson_open ? std::floor(size.x * 0.34f) : 0.0f;
  if (id == PanelId::lesson) return {size.x - lesson_w, top, lesson_w, size.y - top};
  const float W = size.x - lesson_w, H = size.y - top;
  // Beside a lesson the Devices panel is narrower, so its diagram and notes take more lines: the
  // first row gets more of the height and the Timeline less.
  const float r1 = std::floor(H * (lesson_open ? 0.45f : 0.36f)), r2 = std::floor(H * 0.34f), r3 = H - r1 - r2;
  const float c1 = std::floor(W * 0.42f), c2 = std::floor(W * 0.70f);
  switch (id) {
    case PanelId::devices: return {0, top, c1, r1};
    case PanelId::step_flow: return {c1, top, W - c1, r1};
    case PanelId::memory: return {0, top + r1, c1, r2};
    case PanelId::training: return {c1, top + r1, c2 - c1, r2};
    // The Controls take the right column's two lower rows: every knob in view at 1280x800 (beside
    // a lesson, two to a line and the model's behind a closed header).
    case PanelId::controls: return {c2, top + r1, W - c2, r2 + r3};
    case PanelId::timeline: return {0, top + r1 + r2, c2, r3};
    case PanelId::lesson: break;
  }
  return {0, top, W, H};
}

// The run's state as the status line says it ("held": a lesson step's run after its last step).
const char* state_label(const RunStatus& run, bool zh) {
  if (run.held) return tr(zh, "held", "已暂停");
  switch (run.state) {
    case RunStatus::State::idle: return tr(zh, "idle", "空闲");
    case RunStatus::State::loading: return tr(zh, "loading", "加载中");
    case RunStatus::State::running: return tr(zh, "training", "训练中");
    case RunStatus::State::finished: return tr(zh, "finished", "已完成");
    case RunStatus::State::stopped: return tr(zh, "stopped", "已停止");
    case RunStatus::State::failed: return tr(zh, "failed", "失败");
  }
  return "?";
}

void draw_status(const AppState& app, const Snapshot& snap) {
  const bool zh = app.lesson.zh;
  const RunStatus& run = snap.run;
  ImU32 dot = colors::kTextDim;
  switch (run.state) {
    case RunStatus::State::running: dot = colors::kAllocated; break;
    case RunStatus::State::loading: dot = colors::kWarning; break;
    case RunStatus::State::failed: dot = colors::kError; break;
    default: break;
  }
  char line[192];
  const TrainingSeries& t = snap.training;
  if (t.total_steps > 0)
    std::snprintf(line, sizeof line, tr(zh, "%s  step %lld/%lld  epoch %d/%d   %s  %.1f ms/frame",
                                         "%s  第 %lld/%lld 步  第 %d/%d 轮   %s  %.1f ms/帧"),
                  state_label(run, zh), static_cast<long long>(t.global_step),
                  static_cast<long long>(t.total_steps), t.epoch, t.epochs,
                  snap.topology.name.c_str(), app.frame_ms);
  else
    std::snprintf(line, sizeof line, tr(zh, "%s   %s  %.1f ms/frame", "%s   %s  %.1f ms/帧"), state_label(run, zh),
                  snap.topology.name.c_str(), app.frame_ms);
  const float r = 4.5f;
  const float dot_w = 2 * r + 4 + ImGui::GetStyle().ItemSpacing.x;  // the dot and the gap after it
  const float right = ImGui::GetWindowWidth() - 2 * ImGui::GetStyle().WindowPadding.x;  // a margin at the bar's end
  float w = ImGui::CalcTextSize(line).x + dot_w;
  const float room = right - ImGui::GetCursorPosX() - 16;
  if (w > room) {  // a narrow window: the state and the step only
    std::snprintf(line, sizeof line, "%s %lld/%lld", state_label(run, zh),
                  static_cast<long long>(t.global_step), static_cast<long long>(t.total_steps));
    w = ImGui::CalcTextSize(line).x + dot_w;
  }
  ImGui::SameLine(std::max(ImGui::GetCursorPosX() + 16, right - w));
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::GetWindowDrawList()->AddCircleFilled(
      ImVec2(p.x + r, p.y + ImGui::GetTextLineHeight() * 0.5f + 1), r, dot);
  ImGui::Dummy(ImVec2(2 * r + 4, 1));
  ImGui::SameLine();
  ImGui::TextUnformatted(line);
  if (!run.message.empty() && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", run.message.c_str());
}

}  // namespace

void Ui::draw_frame(AppState& app, const Snapshot& snap) {
  const ImGuiIO& io = ImGui::GetIO();
  float top = 0;
  if (ImGui::BeginMainMenuBar()) {
    top = ImGui::GetWindowHeight();
    ImGui::TextUnformatted("Furnace 炼丹炉");
    const bool zh = app.lesson.zh;
    if (ImGui::BeginMenu(tr(zh, "View###view", "视图###view"))) {
      for (int i = 0; i < kPanelCount; ++i)
        ImGui::MenuItem(panel_title(static_cast<PanelId>(i), app.lesson.zh), nullptr, &app.open[i]);
      ImGui::Separator();
      if (ImGui::MenuItem(tr(zh, "Reset layout", "恢复默认布局"))) laid_out_for = ImVec2(0, 0);
      ImGui::EndMenu();
    }
    if (ImGui::BeginMenu(tr(zh, "Run###run", "运行###run"))) {
      if (ImGui::MenuItem(tr(zh, "Restart", "重新开始"))) app.restart_requested = true;
      if (ImGui::MenuItem(tr(zh, "Stop", "停止"))) app.stop_requested = true;
      if (ImGui::MenuItem(tr(zh, "New process (CUDA not initialised)", "新进程（CUDA 尚未初始化）"))) app.new_process_requested = true;
      ImGui::EndMenu();
    }
    draw_status(app, snap);
    ImGui::EndMainMenuBar();
  }

  step_flow.update(snap, io.DeltaTime);

  const bool lesson_open = app.is_open(PanelId::lesson);
  const bool relayout = laid_out_for.x != io.DisplaySize.x || laid_out_for.y != io.DisplaySize.y ||
                        laid_out_with_lesson != lesson_open;
  laid_out_for = io.DisplaySize;
  laid_out_with_lesson = lesson_open;
  // The panel the current lesson step talks about gets an outline that pulses.
  const lesson::Step* step = snap.lesson.current_step();
  const std::optional<PanelId> highlighted =
      step && lesson_open ? parse_panel(step->panel) : std::nullopt;
  const ImGuiWindowFlags solo_flags =
      ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse;
  for (int i = 0; i < kPanelCount; ++i) {
    const auto id = static_cast<PanelId>(i);
    if (app.solo ? *app.solo != id : !app.open[i]) continue;
    if (app.solo) {
      ImGui::SetNextWindowPos(ImVec2(0, top), ImGuiCond_Always);
      ImGui::SetNextWindowSize(ImVec2(io.DisplaySize.x, io.DisplaySize.y - top), ImGuiCond_Always);
    } else {
      const Rect r = default_rect(id, io.DisplaySize, top, lesson_open);
      const ImGuiCond cond = relayout ? ImGuiCond_Always : ImGuiCond_FirstUseEver;
      ImGui::SetNextWindowPos(ImVec2(r.x, r.y), cond);
      ImGui::SetNextWindowSize(ImVec2(r.w, r.h), cond);
    }
    const bool visible = ImGui::Begin(panel_title(id, app.lesson.zh), app.solo ? nullptr : &app.open[i],
                                      app.solo ? solo_flags : 0);
    if (visible) {
      switch (id) {
        case PanelId::devices: devices.draw_frame(app, snap); break;
        case PanelId::step_flow: step_flow.draw_frame(app, snap); break;
        case PanelId::memory: memory.draw_frame(app, snap); break;
        case PanelId::training: training.draw_frame(app, snap); break;
        case PanelId::timeline: timeline.draw_frame(app, snap); break;
        case PanelId::controls: controls.draw_frame(app, snap); break;
        case PanelId::lesson: lesson.draw_frame(app, snap); break;
      }
    }
    if (highlighted == id && !app.solo) {
      const ImVec2 p = ImGui::GetWindowPos(), s = ImGui::GetWindowSize();
      const float pulse = 0.55f + 0.45f * std::sin(static_cast<float>(snap.time_s) * 4.0f);
      ImGui::GetForegroundDrawList()->AddRect(ImVec2(p.x + 1, p.y + 1), ImVec2(p.x + s.x - 1, p.y + s.y - 1),
                                              with_alpha(colors::kPeak, pulse), 4.0f, 0, 3.0f);
    }
    ImGui::End();
  }
}

}  // namespace furnace::viz
