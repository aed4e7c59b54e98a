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

#include "lesson_driver.h"  // defines: LessonView, StepMemory, current_step_memory
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
  dl->PushClipRect(o, ImVec2(o.x + label_w - 4, o.y + line), true);
  dl->AddText(o, colors::kText, row.label.c_str());
  dl->PopClipRect();
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
  dim_wrapped(zh ? "实时训练（可视化器自己的训练进程）：" : "Live run (the visualizer's own training process):");
}

}  // namespace

void MemoryPanel::draw_frame(AppState& app, const Snapshot& snap) {
  // The step's figures are read from its outcome once, when the results or the step change.
  const LessonView& v = snap.lesson;
  if (v.outcomes != step_outcomes_ || v.lesson != step_lesson_ || v.step != step_index_) {
    step_outcomes_ = v.outcomes;
    step_lesson_ = v.lesson;
    step_index_ = v.step;
    step_memory_ = current_step_memory(v);
  }
  draw_lesson_step(v, step_memory_, app.lesson.zh);
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
      for (const char* format : {"%s: not used by this process, no CUDA context (%s free)",
                                 "%s: not used, no context (%s free)", "%s: not used (%s free)"}) {
        std::snprintf(buf, sizeof buf, format, short_gpu_name(d.name).c_str(), human_bytes(cap).c_str());
        if (ImGui::CalcTextSize(buf).x <= width - label_w) break;
      }
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
    // The longest caption that fits under the bar: a narrow panel drops words, not the figures.
    const std::string a = human_bytes(static_cast<double>(d.allocated)), r = human_bytes(static_cast<double>(d.reserved));
    for (const char* format : {"allocated %s   reserved %s   context %s", "allocated %s  reserved %s",
                               "alloc %s  resv %s", "%s / %s"}) {
      std::snprintf(buf, sizeof buf, format, a.c_str(), r.c_str(), human_bytes(ctx).c_str());
      if (ImGui::CalcTextSize(buf).x <= bar_w) break;
    }
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
