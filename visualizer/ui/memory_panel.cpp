// MemoryPanel: per GPU, what nvidia-smi would show (the CUDA context plus the caching allocator's
// reserved memory, against capacity) and what PyTorch reports (allocated inside reserved, with the
// peak), both read from the runtime's alloc/free events every frame, and a sampled history of
// allocated and reserved. Bars of the second kind share one scale across GPUs, so DataParallel's
// heavier GPU 0 stands out (pitfalls 6, 7, 14). Above them, when the open lesson's current step
// is about memory and has run, that step's own figures (StepMemory): the live run is not what the
// step talks about.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "furnace/imbalance.h"  // defines: explain_imbalance
#include "lesson_driver.h"  // defines: LessonView, StepMemory, current_step_memory
#include "lang.h"    // defines: tr
#include "panels.h"  // defines: the panel structs, Ui, human_bytes, short_gpu_name
#include "run_banner.h"  // defines: draw_run_banner
#include "text_fit.h"   // defines: text_in_box
#include "theme.h"   // defines: colors::*, stage_color, with_alpha
#include "wrapped_label.h"  // defines: wrapped_label

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

// ---- a lesson step's own figures -----------------------------------------------------------

// Text in pieces of different colours on one line, e.g. "5.0 MiB" green, " / " dim, "52.0 MiB" blue.
struct Piece {
  std::string text;
  ImU32 color;
};

float pieces_width(const std::vector<Piece>& pieces) {
  float w = 0;
  for (const Piece& p : pieces) w += ImGui::CalcTextSize(p.text.c_str()).x;
  return w;
}

void draw_pieces(ImDrawList* dl, ImVec2 at, const std::vector<Piece>& pieces) {
  for (const Piece& p : pieces) {
    dl->AddText(at, p.color, p.text.c_str());
    at.x += ImGui::CalcTextSize(p.text.c_str()).x;
  }
}

// human_bytes for the step's integer byte counts.
std::string bytes_text(int64_t bytes) { return human_bytes(static_cast<double>(bytes)); }

// One row of a step's section: its label, the figures right of its bar, and a note under them.
struct StepRow {
  std::string label;
  std::vector<Piece> figures;
  std::string note;
};

// The widest figures of `rows`: the column the bars end at.
float figures_width(const std::vector<StepRow>& rows) {
  float w = 0;
  for (const StepRow& r : rows) w = std::max(w, pieces_width(r.figures));
  return w;
}

// Draws `row`: the label, a bar that `fill` draws (given its left x, top y, width and height), the
// figures in a column `figures_w` wide at the right, and the note wrapped across the panel.
template <class Fill>
void draw_step_row(const StepRow& row, float figures_w, Fill fill) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float line = ImGui::GetTextLineHeight();
  const float width = ImGui::GetContentRegionAvail().x;
  const float label_w = std::min(ImGui::CalcTextSize("empty_cache ").x, width * 0.3f);
  const float bar_w = std::max(30.0f, width - label_w - figures_w - 8);
  const ImVec2 o = ImGui::GetCursorScreenPos();
  text_in_box(dl, o, label_w - 4, colors::kText, row.label.c_str());
  const float bx = o.x + label_w, h = line * 0.8f, by = o.y + (line - h) * 0.5f;
  dl->AddRectFilled(ImVec2(bx, by), ImVec2(bx + bar_w, by + h), colors::kFree);
  fill(bx, by, bar_w, h);
  draw_pieces(dl, ImVec2(bx + bar_w + 6, o.y), row.figures);
  ImGui::Dummy(ImVec2(width, line));
  if (!row.note.empty()) {
    ImGui::Indent(line);
    ImGui::PushStyleColor(ImGuiCol_Text, colors::kTextDim);
    ImGui::TextWrapped("%s", row.note.c_str());
    ImGui::PopStyleColor();
    ImGui::Unindent(line);
  }
  ImGui::Spacing();
}

// Context first, then the rest of what nvidia-smi counts (reserved), both to `scale`, as the
// live panel's nvidia-smi bar draws them.
void smi_bar(ImDrawList* dl, float x, float y, float w, float h, int64_t used, int64_t context, double scale) {
  auto xs = [&](int64_t b) { return std::min(w, w * static_cast<float>(static_cast<double>(b) / scale)); };
  bar_segment(dl, x, y, h, 0, xs(context), colors::kContext);
  bar_segment(dl, x, y, h, xs(context), xs(used), colors::kReserved);
}

// "= CUDA context 400.0 MiB + reserved 20.0 MiB", the parts in their bar colours.
std::vector<Piece> smi_parts(int64_t used, int64_t context) {
  return {{"= ", colors::kTextDim}, {"CUDA context " + bytes_text(context), colors::kContext}, {" + ", colors::kTextDim},
          {"reserved " + bytes_text(used - context), colors::kReserved}};
}

void dim_wrapped(const char* text) {
  ImGui::PushStyleColor(ImGuiCol_Text, colors::kTextDim);
  ImGui::TextWrapped("%s", text);
  ImGui::PopStyleColor();
}

void error_wrapped(const std::string& text) {
  if (text.empty()) return;
  ImGui::PushStyleColor(ImGuiCol_Text, colors::kError);
  ImGui::TextWrapped("%s", text.c_str());
  ImGui::PopStyleColor();
}

// Action "memory": one row per operation, allocated inside reserved on one scale (the largest
// reserved), then what nvidia-smi shows for the process: the context and reserved, to a scale of
// their own (the context is hundreds of MiB and would flatten the rows above).
void draw_allocator_replay(const StepMemory& m, bool zh) {
  dim_wrapped(zh ? "逐个操作：allocated（绿）画在 reserved（蓝）里面，各行同一比例。"
                 : "Operation by operation: allocated (green) inside reserved (blue), one scale.");
  std::vector<StepRow> rows;
  int64_t largest = 1;
  for (const StepMemory::Operation& op : m.operations) {
    // The runtime's note reads "alloc[0]: what happened": the operation becomes the row's label.
    const size_t colon = op.note.find(": ");
    StepRow r;
    r.label = op.note.substr(0, colon);
    r.note = colon == std::string::npos ? "" : op.note.substr(colon + 2);
    r.figures = {{bytes_text(op.allocated), colors::kAllocated}, {" / ", colors::kTextDim}, {bytes_text(op.reserved), colors::kReserved}};
    rows.push_back(std::move(r));
    largest = std::max({largest, op.reserved, op.allocated});
  }
  const StepRow smi{"nvidia-smi", {{bytes_text(m.smi_used), colors::kText}}, ""};
  const float figures_w = std::max(figures_width(rows), pieces_width(smi.figures));
  const double scale = static_cast<double>(largest) * 1.05;
  for (size_t i = 0; i < rows.size(); ++i) {
    const StepMemory::Operation& op = m.operations[i];
    draw_step_row(rows[i], figures_w, [&](float x, float y, float w, float h) {
      auto xs = [&](int64_t b) { return std::min(w, w * static_cast<float>(static_cast<double>(b) / scale)); };
      bar_segment(ImGui::GetWindowDrawList(), x, y, h, 0, xs(op.reserved), colors::kReserved);
      bar_segment(ImGui::GetWindowDrawList(), x, y, h, 0, xs(op.allocated), colors::kAllocated);
    });
  }
  error_wrapped(m.error);
  ImGui::Separator();
  draw_step_row(smi, figures_w, [&](float x, float y, float w, float h) {
    smi_bar(ImGui::GetWindowDrawList(), x, y, w, h, m.smi_used, m.context,
            static_cast<double>(std::max<int64_t>(m.smi_used, 1)));
  });
  const ImVec2 at = ImGui::GetCursorScreenPos();
  const std::vector<Piece> parts = smi_parts(m.smi_used, m.context);
  draw_pieces(ImGui::GetWindowDrawList(), ImVec2(at.x + ImGui::GetTextLineHeight(), at.y), parts);
  ImGui::Dummy(ImVec2(pieces_width(parts), ImGui::GetTextLineHeight()));
  dim_wrapped(zh ? "（这一行单独成比例：context 有几百 MiB。）" : "(this row has its own scale: the context is hundreds of MiB)");
}

// Action "machine": nvidia-smi per GPU at the end of the story's part, every process together.
void draw_machine_memory(const StepMemory& m, bool zh) {
  dim_wrapped(zh ? "这一段结束时的 nvidia-smi：每块 GPU 上所有进程的 CUDA context（紫）加 reserved（蓝），同一比例。"
                 : "nvidia-smi at the end of this part: per GPU, every process's CUDA context (purple) plus "
                   "reserved (blue), one scale.");
  std::vector<StepRow> rows;
  int64_t largest = 1;
  char buf[64];
  for (const StepMemory::Gpu& g : m.gpus) {
    StepRow r;
    std::snprintf(buf, sizeof buf, "GPU %d", g.index);
    r.label = buf;
    r.figures = {{bytes_text(g.used), colors::kText}};
    if (zh) std::snprintf(buf, sizeof buf, "%d 个进程：", g.processes);
    else std::snprintf(buf, sizeof buf, "%d process%s: ", g.processes, g.processes == 1 ? "" : "es");
    r.note = g.processes ? buf + bytes_text(g.context) + " CUDA context + " + bytes_text(g.used - g.context) + " reserved"
                         : (zh ? "没有进程" : "no process");
    rows.push_back(std::move(r));
    largest = std::max(largest, g.used);
  }
  const float figures_w = figures_width(rows);
  const double scale = static_cast<double>(largest) * 1.05;
  for (size_t i = 0; i < rows.size(); ++i) {
    const StepMemory::Gpu& g = m.gpus[i];
    draw_step_row(rows[i], figures_w, [&](float x, float y, float w, float h) {
      smi_bar(ImGui::GetWindowDrawList(), x, y, w, h, g.used, g.context, scale);
    });
  }
  error_wrapped(m.error);
}

// The section above the live bars: the current step's figures `m` (read from its outcome), or
// how to get them.
void draw_lesson_step(const LessonView& v, const std::optional<StepMemory>& m, bool zh) {
  const lesson::Step* step = v.current_step();
  if (!step || (step->action != "memory" && step->action != "machine")) return;
  ImGui::PushStyleColor(ImGuiCol_Text, colors::kAccuracy);
  ImGui::Text("%s%s", zh ? "课程步骤：" : "Lesson step: ", step->id.c_str());
  ImGui::PopStyleColor();
  if (m) {
    if (m->action == "memory") draw_allocator_replay(*m, zh);
    else draw_machine_memory(*m, zh);
  } else {
    dim_wrapped(v.running ? (zh ? "运行中..." : "Running...")
                          : (zh ? "在课程面板里点“运行并检查”，这一步的显存数字会显示在这里。"
                                : "Run the step (Lesson panel, \"Run and check\") to see its memory here."));
  }
  ImGui::Spacing();
  ImGui::Separator();
}


// The first of `texts` that fits `room` (the last one otherwise, noted by check_fit when drawn).
const std::string& first_fitting(const std::vector<std::string>& texts, float room) {
  for (const std::string& t : texts)
    if (ImGui::CalcTextSize(t.c_str()).x <= room) return t;
  return texts.back();
}

// A round scale above `top` bytes: 1, 2 or 5 times a power of two's MiB/GiB unit, so the quarter
// ticks read as plain numbers.
double nice_scale(double top) {
  double unit = 1024.0 * 1024.0;
  while (unit * 1024 <= top) unit *= 1024;
  for (double step = unit / 1024; step <= top * 4; step *= 2)
    for (double m : {1.0, 2.5, 5.0})
      if (step * m * 4 >= top && step * m * 4 >= 4096) return step * m * 4;
  return std::max(top, 1.0);
}

// A bar's frame: the free background and quarter ticks, so lengths can be read against the scale.
void bar_frame(ImDrawList* dl, float x, float y, float w, float h) {
  dl->AddRectFilled(ImVec2(x, y), ImVec2(x + w, y + h), colors::kFree);
  for (int q = 1; q < 4; ++q) {
    const float tx = x + w * static_cast<float>(q) / 4.0f;
    dl->AddLine(ImVec2(tx, y), ImVec2(tx, y + h), colors::kGrid, 1.0f);
  }
}

// "cuda:0 = GPU 2" for a GPU this process sees, "GPU 2" otherwise.
std::string row_name(const Snapshot& snap, int physical) {
  for (const VisibleDevice& v : snap.visibility.devices)
    if (v.physical_index == physical)
      return "cuda:" + std::to_string(v.ordinal) + " = GPU " + std::to_string(physical);
  return "GPU " + std::to_string(physical);
}

// The UserWarning as Python prints it, on one paragraph (its own line breaks and indents dropped).
std::string one_paragraph(const std::string& warning) {
  std::string out;
  bool space = false;
  for (char c : warning) {
    if (c == '\n' || c == ' ') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

}  // namespace

void MemoryPanel::draw_frame(AppState& app, const Snapshot& snap) {
  const bool zh = app.lesson.zh;
  // The step's figures are read from its outcome once, when the results or the step change.
  const LessonView& v = snap.lesson;
  if (v.outcomes != step_outcomes_ || v.lesson != step_lesson_ || v.step != step_index_) {
    step_outcomes_ = v.outcomes;
    step_lesson_ = v.lesson;
    step_index_ = v.step;
    step_memory_ = current_step_memory(v);
  }
  draw_lesson_step(v, step_memory_, zh);
  if (draw_run_banner(app, snap)) return;
  for (const std::string& w : snap.training.warnings) {
    wrapped_label(colors::kWarning, "UserWarning: " + one_paragraph(w));
  }
  // PyTorch's "GPU N" are device_ids entries; the rows below are labelled "cuda:N = GPU M".
  if (snap.training.imbalance && snap.process_from_run)
    wrapped_label(colors::kTextDim, parallel::explain_imbalance(*snap.training.imbalance, snap.topology,
                                                                 snap.visibility, zh));
  ImGui::Checkbox(tr(zh, "to capacity###capacity", "按总容量###capacity"), &capacity_scale);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("%s", tr(zh, "off: one scale for every bar, a little above the fullest GPU\n"
                                   "on: every bar is the GPU's whole memory",
                               "关：所有条同一比例，略高于最满的 GPU\n开：每条代表整块 GPU 的显存"));
  const float sw = ImGui::GetTextLineHeight() * 0.8f;
  auto legend = [&](ImU32 c, const char* label) {  // on the line while it fits, else the next
    ImGui::SameLine();
    if (ImGui::GetContentRegionAvail().x < sw + 3 + ImGui::CalcTextSize(label).x) ImGui::NewLine();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + 3), ImVec2(p.x + sw, p.y + 3 + sw), c);
    ImGui::Dummy(ImVec2(sw, sw));
    ImGui::SameLine(0, 3);
    ImGui::TextUnformatted(label);
  };
  // The article's words (保留 for memory_reserved, 已分配 for memory_allocated), with PyTorch's.
  legend(colors::kContext, tr(zh, "context", "CUDA 上下文"));
  legend(colors::kReserved, tr(zh, "reserved", "保留 reserved"));
  legend(colors::kAllocated, tr(zh, "allocated", "已分配 allocated"));
  legend(colors::kPeak, tr(zh, "peak", "峰值"));

  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float line = ImGui::GetTextLineHeight();
  const float width = ImGui::GetContentRegionAvail().x;
  const float hist_w = width >= 480 ? std::min(140.0f, width * 0.22f) : 0.0f;  // history: only with room
  const char* smi_label = "nvidia-smi";
  const char* torch_label = "PyTorch";
  const float label_w = std::max(ImGui::CalcTextSize(smi_label).x, ImGui::CalcTextSize(torch_label).x) + 8;
  const float value_w = ImGui::CalcTextSize("999.9 MiB / 999.9 MiB").x + 8;
  const float bar_w = std::max(40.0f, width - label_w - value_w - (hist_w > 0 ? hist_w + 10 : 0));
  // Two scales, each shared by every GPU and printed above the rows: the nvidia-smi bars (the
  // context, hundreds of MiB, in proportion to what the cache reserved) and the PyTorch bars
  // (allocated inside reserved, so DataParallel's heavier cuda:0 stands out).
  double smi_top = 1, torch_top = 1;
  uint64_t capacity = 1;
  bool any_used = false;
  for (const DeviceView& d : snap.devices) {
    capacity = std::max<uint64_t>(capacity, d.capacity);
    if (!d.used) continue;
    any_used = true;
    const double reserved = static_cast<double>(std::max(d.reserved, d.peak_reserved));
    smi_top = std::max(smi_top, static_cast<double>(d.context) + reserved);
    torch_top = std::max({torch_top, reserved, static_cast<double>(d.peak_allocated)});
  }
  const double smi_scale = capacity_scale ? static_cast<double>(capacity) : nice_scale(smi_top * 1.05);
  const double torch_scale = capacity_scale ? static_cast<double>(capacity) : nice_scale(torch_top * 1.05);
  if (!capacity_scale && !any_used) {  // no GPU used yet (or the run failed before one was): no scale to give
    wrapped_label(colors::kTextDim, tr(zh, "scale: no GPU memory used yet", "比例：还没有用到显存"));
  } else {
    char buf[200];
    const std::string s = human_bytes(smi_scale), t = human_bytes(torch_scale);
    std::snprintf(buf, sizeof buf, tr(zh, "scale: a full bar is %s (nvidia-smi) and %s (PyTorch); ticks at quarters",
                                      "比例：整条 = %s（nvidia-smi）和 %s（PyTorch）；刻度为四分之一"),
                  s.c_str(), t.c_str());
    wrapped_label(colors::kTextDim, buf);
  }
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  auto xs = [&](double bytes, double scale) { return std::min(bar_w, bar_w * static_cast<float>(bytes / scale)); };
  // In the process's order (cuda:0, cuda:1, ...), then the GPUs it cannot see. Used GPUs get
  // bars and history; GPUs the process never touched get one line (no context).
  std::vector<const DeviceView*> rows;
  for (const VisibleDevice& v : snap.visibility.devices)
    if (v.physical_index >= 0 && v.physical_index < static_cast<int>(snap.devices.size()))
      rows.push_back(&snap.devices[static_cast<size_t>(v.physical_index)]);
  for (const DeviceView& d : snap.devices)
    if (std::find(rows.begin(), rows.end(), &d) == rows.end()) rows.push_back(&d);
  for (const DeviceView* row : rows) {
    const DeviceView& d = *row;
    const ImVec2 o = ImGui::GetCursorScreenPos();
    const std::string name = row_name(snap, d.index), gpu = short_gpu_name(d.name);
    const std::string cap = human_bytes(static_cast<double>(d.capacity));
    if (!d.used) {
      const std::string text = first_fitting(
          {name + "  " + gpu + tr(zh, ": not used by this process, no CUDA context", "：进程没用过，没有 CUDA 上下文"),
           name + tr(zh, ": not used, no context", "：没用过，没有上下文"), name + tr(zh, ": not used", "：没用过"), name},
          width);
      text_in_box(dl, o, width, colors::kTextDim, text.c_str());
      ImGui::Dummy(ImVec2(width, line + 2));
      continue;
    }
    const float row_h = 3 * line + 8;
    if (!ImGui::IsRectVisible(o, ImVec2(o.x + width, o.y + row_h))) {  // scrolled away: space only
      ImGui::Dummy(ImVec2(width, row_h + 4));
      continue;
    }
    const std::string title = first_fitting({name + "  " + gpu + "  " + cap, name + "  " + gpu, name}, width - hist_w);
    text_in_box(dl, o, width - hist_w, colors::kText, title.c_str());
    const float bx = o.x + label_w, h = line * 0.8f;
    // Bar 1, what nvidia-smi shows: the context plus everything reserved.
    const float y1 = o.y + line + 2;
    text_in_box(dl, ImVec2(o.x, y1), label_w, colors::kTextDim, smi_label);
    bar_frame(dl, bx, y1 + (line - h) * 0.5f, bar_w, h);
    const double ctx = static_cast<double>(d.context), resv = static_cast<double>(d.reserved);
    bar_segment(dl, bx, y1 + (line - h) * 0.5f, h, 0, xs(ctx, smi_scale), colors::kContext);
    bar_segment(dl, bx, y1 + (line - h) * 0.5f, h, xs(ctx, smi_scale), xs(ctx + resv, smi_scale), colors::kReserved);
    text_in_box(dl, ImVec2(bx + bar_w + 6, y1), value_w - 6, colors::kText, human_bytes(ctx + resv).c_str());
    // Bar 2, what PyTorch reports: allocated inside reserved, the peak as a tick.
    const float y2 = y1 + line + 2;
    text_in_box(dl, ImVec2(o.x, y2), label_w, colors::kTextDim, torch_label);
    const float by = y2 + (line - h) * 0.5f;
    bar_frame(dl, bx, by, bar_w, h);
    bar_segment(dl, bx, by, h, 0, xs(resv, torch_scale), colors::kReserved);
    bar_segment(dl, bx, by, h, 0, xs(static_cast<double>(d.allocated), torch_scale), colors::kAllocated);
    const float pk = xs(static_cast<double>(d.peak_allocated), torch_scale);
    if (pk > 0) dl->AddLine(ImVec2(bx + pk, by - 2), ImVec2(bx + pk, by + h + 2), colors::kPeak, 2);
    const std::string figures = human_bytes(static_cast<double>(d.allocated)) + " / " + human_bytes(resv);
    text_in_box(dl, ImVec2(bx + bar_w + 6, y2), value_w - 6, colors::kText, figures.c_str());
    // History.
    if (hist_w > 0) {
      const ImVec2 ha(o.x + width - hist_w, o.y), hb(o.x + width, o.y + row_h - 4);
      history_plot(dl, ha, hb, d.allocated_mib, d.reserved_mib, static_cast<float>(torch_scale / (1024.0 * 1024.0)));
    }
    if (mouse.x >= o.x && mouse.x < o.x + width && mouse.y >= o.y && mouse.y < o.y + row_h)
      ImGui::SetTooltip(tr(zh, "%s  %s\nmemory_allocated %s (peak %s)\nmemory_reserved  %s (peak %s)\n"
                               "CUDA context     %s\ncapacity         %s\n"
                               "nvidia-smi shows context + reserved; freed tensors stay reserved (cached)\n"
                               "history: the last %.0f s, allocated (line) and reserved (area)",
                           "%s  %s\nmemory_allocated %s（峰值 %s）\nmemory_reserved  %s（峰值 %s）\n"
                           "CUDA context     %s\n总容量           %s\n"
                           "nvidia-smi 显示 context + reserved；释放的张量仍算在 reserved 里（缓存）\n"
                           "历史：最近 %.0f 秒，allocated（线）和 reserved（面积）"),
                        name.c_str(), d.name.c_str(), human_bytes(static_cast<double>(d.allocated)).c_str(),
                        human_bytes(static_cast<double>(d.peak_allocated)).c_str(), human_bytes(resv).c_str(),
                        human_bytes(static_cast<double>(d.peak_reserved)).c_str(), human_bytes(ctx).c_str(),
                        cap.c_str(), d.allocated_mib.capacity() * 0.1);
    ImGui::Dummy(ImVec2(width, row_h));
  }
}

}  // namespace furnace::viz
