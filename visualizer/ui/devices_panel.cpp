// DevicesPanel: the machine's physical GPUs as boxes (name, memory, bus id) with their links, the
// process's CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER (editable), and an arrow from each logical
// cuda:N to the physical GPU it names; where the list stopped and why. After the process's first
// device use, edits change nothing until a restart, as on a real machine (pitfalls 1, 2, 3, 8).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <imgui.h>
#include <imgui_stdlib.h>  // defines: ImGui::InputText for std::string

#include "lang.h"    // defines: tr
#include "panels.h"  // defines: the panel structs, Ui, human_bytes, short_gpu_name
#include "text_fit.h"  // defines: text_in_box, check_fit
#include "theme.h"   // defines: colors::*, stage_color, with_alpha
#include "wrapped_label.h"  // defines: wrapped_label

namespace furnace::viz {
namespace {

struct LinkSummary {
  bool fabric = false;  // every pair connected the same way (an NVSwitch)
  LinkKind kind = LinkKind::pcie;
  double gbps = 0;
};

LinkSummary summarize_links(const Topology& t) {
  LinkSummary s;
  const size_t n = t.gpus.size();
  if (n < 2 || t.links.size() != n * (n - 1) / 2 || t.links.empty()) return s;
  s.fabric = true;
  s.kind = t.links.front().kind;
  s.gbps = t.links.front().bandwidth / 1e9;
  for (const LinkSpec& l : t.links) s.fabric = s.fabric && l.kind == s.kind;
  return s;
}

// The longest prefix of whole words of `text` that fits in `width` pixels (at least one word).
void fit_words(const std::string& text, float width, char* out, size_t size) {
  std::snprintf(out, size, "%s", text.c_str());
  while (ImGui::CalcTextSize(out).x > width) {
    char* space = std::strrchr(out, ' ');
    if (!space) break;
    *space = 0;
  }
}

const char* stop_text(VisibilityStop s, bool zh) {
  switch (s) {
    case VisibilityStop::none: return "";
    case VisibilityStop::invalid_entry: return tr(zh, "an invalid entry ends the list", "无效的条目让列表到此为止");
    case VisibilityStop::out_of_range:
      return tr(zh, "an ordinal beyond the last GPU ends the list", "超出最后一块 GPU 的序号让列表到此为止");
    case VisibilityStop::unknown_uuid:
      return tr(zh, "a UUID that matches no GPU ends the list", "不匹配任何 GPU 的 UUID 让列表到此为止");
    case VisibilityStop::ambiguous_uuid:
      return tr(zh, "a UUID prefix that matches several GPUs ends the list", "匹配多块 GPU 的 UUID 前缀让列表到此为止");
    case VisibilityStop::mixed_forms: return tr(zh, "mixing ordinals and UUIDs ends the list", "混用序号和 UUID 让列表到此为止");
    case VisibilityStop::mig_unavailable:
      return tr(zh, "a MIG id, but no GPU here is in MIG mode", "是 MIG id，但这里没有处于 MIG 模式的 GPU");
    case VisibilityStop::duplicate: return tr(zh, "a GPU named twice: the whole list is empty", "同一块 GPU 出现两次：整个列表为空");
  }
  return "";
}

// One entry of CUDA_VISIBLE_DEVICES as the notes show it: what became of it, in a box.
struct EntryChip {
  std::string text;  // "2 -> cuda:0", "-1 stops here", "7 ignored"
  ImU32 color;
  float x;  // from the notes' left edge
  int row;
};

const char* entries_label(bool zh) { return tr(zh, "entries: ", "条目："); }

// The entries of `vis`'s CUDA_VISIBLE_DEVICES, laid out in rows `width` pixels wide after
// entries_label; none when the variable is unset or empty.
std::vector<EntryChip> entry_chips(const Visibility& vis, float width, bool zh) {
  std::vector<EntryChip> chips;
  if (!vis.cuda_visible_devices || vis.cuda_visible_devices->empty()) return chips;
  const std::string& value = *vis.cuda_visible_devices;
  const float indent = ImGui::CalcTextSize(entries_label(zh)).x;
  float x = indent;
  int row = 0;
  int index = 0;
  for (size_t start = 0; start <= value.size(); ++index) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    const std::string entry = value.substr(start, end - start);
    start = end + 1;
    const int k = index + 1;  // 1-based, as Visibility::stop_entry
    ImU32 col = colors::kTextDim;
    std::string what = tr(zh, "ignored", "被忽略");
    if (vis.stop != VisibilityStop::none && k == vis.stop_entry) {
      col = colors::kWarning;
      what = tr(zh, "stops here", "到此为止");
    } else if (vis.stop == VisibilityStop::none || k < vis.stop_entry) {
      for (const VisibleDevice& d : vis.devices)
        if (d.entry == entry) {
          what = "-> cuda:" + std::to_string(d.ordinal);
          col = colors::kAllocated;
        }
    }
    std::string text = (entry.empty() ? std::string("''") : entry) + " " + what;
    const float w = ImGui::CalcTextSize(text.c_str()).x;
    if (x + w + 8 > width && x > 60) {  // the next row, under the first entry
      x = indent;
      ++row;
    }
    chips.push_back({std::move(text), col, x, row});
    x += w + 14;
    if (end == value.size()) break;
  }
  return chips;
}

}  // namespace

void DevicesPanel::draw_frame(AppState& app, const Snapshot& snap) {
  const bool zh = app.lesson.zh;
  const Topology& topo = snap.topology;
  const Visibility& vis = snap.visibility;
  const int n = static_cast<int>(topo.gpus.size());

  // ---- the environment -------------------------------------------------------------------
  if (!synced) {
    edit_buffer = app.env.visible;
    synced = true;
  }
  ImGui::Checkbox("##set", &app.env.visible_set);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tr(zh, "CUDA_VISIBLE_DEVICES set (unchecked: not set, every GPU visible)",
                                                          "设置了 CUDA_VISIBLE_DEVICES（不勾选：不设置，所有 GPU 都可见）"));
  ImGui::SameLine();
  ImGui::TextUnformatted("CUDA_VISIBLE_DEVICES=");
  ImGui::SameLine();
  const char* orders[] = {"FASTEST_FIRST", "PCI_BUS_ID"};
  const ImGuiStyle& style = ImGui::GetStyle();
  const float order_w = ImGui::CalcTextSize(orders[0]).x + ImGui::GetFrameHeight() + 12;
  const float try_w = ImGui::CalcTextSize(tr(zh, "try", "试"), nullptr).x + 2 * style.FramePadding.x;
  const float tail_w = order_w + try_w + 2 * style.ItemSpacing.x;  // the order and "try" after the field
  // All on one line when the field keeps 80 px; else the order and "try" go on the next line.
  const bool one_line = ImGui::GetContentRegionAvail().x - tail_w >= 80;
  ImGui::SetNextItemWidth(std::max(40.0f, ImGui::GetContentRegionAvail().x - (one_line ? tail_w : 0.0f)));
  if (ImGui::InputText("##cvd", &edit_buffer)) {
    app.env.visible = edit_buffer;
    app.env.visible_set = true;
  }
  if (one_line) {
    ImGui::SameLine();
  } else if (ImGui::GetContentRegionAvail().x >= ImGui::CalcTextSize("CUDA_DEVICE_ORDER=").x + tail_w) {
    ImGui::TextUnformatted("CUDA_DEVICE_ORDER=");  // else the combo alone (its tooltip names it)
    ImGui::SameLine();
  }
  ImGui::SetNextItemWidth(order_w);
  int order = app.env.order == "PCI_BUS_ID" ? 1 : 0;
  if (ImGui::Combo("##order", &order, orders, 2)) app.env.order = orders[order];
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", tr(zh, "CUDA_DEVICE_ORDER: how CUDA numbers the GPUs before the mask applies",
                                                          "CUDA_DEVICE_ORDER：应用掩码之前 CUDA 怎样给 GPU 编号"));
  ImGui::SameLine();
  if (ImGui::SmallButton(tr(zh, "try###try", "试###try"))) ImGui::OpenPopup("examples");
  const float try_right = ImGui::GetItemRectMax().x;
  if (ImGui::BeginPopup("examples")) {
    std::string uuid = n > 1 ? topo.gpus[1].uuid.substr(0, 8) : "GPU-";
    const std::string examples[] = {"2,1", "0,2,-1,1", "1,1", uuid, "0,7", ""};
    for (const std::string& e : examples) {
      if (ImGui::Selectable(e.empty() ? "(empty)" : e.c_str())) {
        edit_buffer = e;
        app.env.visible = e;
        app.env.visible_set = true;
      }
    }
    if (ImGui::Selectable("(not set)")) app.env.visible_set = false;
    ImGui::EndPopup();
  }
  // Once CUDA is initialised an edit waits for a restart: its button after "try" where it fits
  // (a line saved beside a lesson), else under the note (after a wrapped text SameLine would put
  // it past the panel's right edge).
  const bool differs = snap.visibility_frozen &&
                       (app.env.visible_set != vis.cuda_visible_devices.has_value() ||
                        (vis.cuda_visible_devices && *vis.cuda_visible_devices != app.env.visible) ||
                        app.env.order != device_order_name(vis.order));
  const char* restart = tr(zh, "restart###restart", "重新开始###restart");
  const float right_edge = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  const bool restart_beside_try =
      right_edge - try_right >= style.ItemSpacing.x + ImGui::CalcTextSize(restart, nullptr, true).x + 2 * style.FramePadding.x;
  if (differs && restart_beside_try) {
    ImGui::SameLine();
    if (ImGui::SmallButton(restart)) app.restart_requested = true;
  }

  // Wrapped by wrapped_label: ImGui's own wrapping breaks a Chinese line after "CUDA".
  if (snap.visibility_frozen) {
    wrapped_label(differs ? colors::kWarning : colors::kTextDim,
                  differs ? tr(zh, "CUDA is initialised in this process: the edit changes nothing until a restart "
                                   "(a new process reads the variable).",
                               "这个进程已经初始化了 CUDA：修改要等重新开始才生效（新进程才会读这个变量）。")
                          : tr(zh, "CUDA was initialised at the first device use: the mapping is frozen for this process.",
                               "CUDA 在第一次使用设备时初始化：这个进程的映射已经固定。"));
    if (differs && !restart_beside_try && ImGui::SmallButton(restart)) app.restart_requested = true;
  } else {
    wrapped_label(colors::kAllocated, tr(zh, "CUDA is not initialised yet: edits apply now (press Run > Restart to train).",
                                         "CUDA 还没有初始化：修改立即生效（点 运行 > 重新开始 来训练）。"));
  }

  // ---- the diagram -------------------------------------------------------------------------
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  const float line = ImGui::GetTextLineHeight();
  const float width = std::max(avail.x, 200.0f);
  // The notes under the cuda:N boxes: the legend, the entries of CUDA_VISIBLE_DEVICES in rows
  // and where the list stopped. Their height is kept free below the boxes, so that a short panel
  // (beside a lesson) shows them rather than draw them past its bottom edge.
  const bool hide_mapping = snap.lesson.awaiting_answer();
  const int m = vis.count();
  char full[160], brief[96];
  if (zh) {
    std::snprintf(full, sizeof full, "上面：按 nvidia-smi 顺序的物理 GPU；下面：进程看到的 %d 个设备", m);
    std::snprintf(brief, sizeof brief, "上面：物理 GPU；下面：进程看到的 %d 个设备", m);
  } else {
    std::snprintf(full, sizeof full, "above: the physical GPUs in nvidia-smi order; below: what the process sees, %d device%s",
                  m, m == 1 ? "" : "s");
    std::snprintf(brief, sizeof brief, "above: nvidia-smi order; below: the process's %d", m);
  }
  const std::vector<EntryChip> chips = entry_chips(vis, width, zh);
  auto notes_height = [&](const char* legend) {
    if (hide_mapping) return 0.0f;
    float h = 3 + ImGui::CalcTextSize(legend, nullptr, false, width).y + 3;
    if (!chips.empty()) h += static_cast<float>(chips.back().row + 1) * (line + 4) - 2;
    if (vis.stop != VisibilityStop::none) h += line + 4;
    return h;
  };
  // Links, the GPU boxes, room for the arrows, the cuda:N boxes and the notes (at least two
  // lines): a short panel scrolls rather than draw the cuda:N boxes over the GPUs.
  const float box_h = 3 * line + 8;
  const float logical_h = 2 * line + 6;
  const float boxes_h = 2.2f * line + box_h + 1.2f * line + logical_h;
  // The legend in full, unless it would not fit below the boxes and its brief form would, on one line.
  const bool short_of_room = boxes_h + notes_height(full) > avail.y;
  const char* legend = short_of_room && ImGui::CalcTextSize(brief).x <= width ? brief : full;
  const float notes_h = notes_height(legend);
  const float height = std::max(avail.y, boxes_h + std::max(notes_h, 2.6f * line));
  ImGui::InvisibleButton("##diagram", ImVec2(width, height));
  if (n == 0) {
    dl->AddText(origin, colors::kTextDim, "no topology loaded");
    return;
  }
  const float gap = 8;
  const float box_w = std::min(170.0f, (width - gap * static_cast<float>(n - 1)) / static_cast<float>(n));
  const float row_w = box_w * static_cast<float>(n) + gap * static_cast<float>(n - 1);
  const float x0 = origin.x + std::max(0.0f, (width - row_w) * 0.5f);
  const float link_y = origin.y + line * 0.6f;
  const float phys_y = link_y + line * 1.6f;
  const float logical_y = std::max(phys_y + box_h + 1.2f * line,
                                   std::min(phys_y + box_h + 3.0f * line, origin.y + height - logical_h - std::max(notes_h, 2.6f * line)));
  auto box_x = [&](int i) { return x0 + static_cast<float>(i) * (box_w + gap); };

  // Links: one bar for a fully connected fabric, arcs for listed pairs, the host bridge otherwise.
  const LinkSummary links = summarize_links(topo);
  char buf[160];
  const ImU32 link_col = links.fabric && links.kind == LinkKind::nvlink ? colors::kNvlink : colors::kPcie;
  dl->AddLine(ImVec2(box_x(0) + box_w * 0.5f, link_y), ImVec2(box_x(n - 1) + box_w * 0.5f, link_y), link_col, 3);
  for (int i = 0; i < n; ++i)
    dl->AddLine(ImVec2(box_x(i) + box_w * 0.5f, link_y), ImVec2(box_x(i) + box_w * 0.5f, phys_y), link_col, 2);
  // The longest label that fits the panel.
  std::vector<std::string> labels;
  auto add = [&](const char* format, auto... args) {
    std::snprintf(buf, sizeof buf, format, args...);
    labels.emplace_back(buf);
  };
  const char* fabric = links.kind == LinkKind::nvlink ? "NVLink" : "PCIe";
  if (zh && links.fabric) {
    add("%s，每对 GPU 之间：每个方向 %.0f GB/s", links.kind == LinkKind::nvlink ? "NVLink (NVSwitch)" : "PCIe", links.gbps);
    add("%s %.0f GB/s", fabric, links.gbps);
  } else if (zh && n > 1) {
    add("GPU 之间没有直连：经主机走 PCIe，%.0f GB/s", topo.host.pinned_bandwidth / 1e9);
    add("经主机 %.0f GB/s", topo.host.pinned_bandwidth / 1e9);
  } else if (zh) {
    add("主机链路：PCIe，锁页内存 %.0f GB/s", topo.host.pinned_bandwidth / 1e9);
    add("主机 PCIe %.0f GB/s", topo.host.pinned_bandwidth / 1e9);
  } else if (links.fabric) {
    add("%s between every pair: %.0f GB/s each way", links.kind == LinkKind::nvlink ? "NVLink (NVSwitch)" : "PCIe", links.gbps);
    add("%s, every pair: %.0f GB/s", fabric, links.gbps);
    add("%s %.0f GB/s", fabric, links.gbps);
  } else if (n > 1) {
    add("no direct links: GPU to GPU over PCIe through the host, %.0f GB/s", topo.host.pinned_bandwidth / 1e9);
    add("no GPU links: via the host, %.0f GB/s", topo.host.pinned_bandwidth / 1e9);
    add("via host %.0f GB/s", topo.host.pinned_bandwidth / 1e9);
  } else {
    add("host link: PCIe, %.0f GB/s pinned, %.0f GB/s pageable", topo.host.pinned_bandwidth / 1e9,
        topo.host.pageable_bandwidth / 1e9);
    add("host: PCIe %.0f GB/s pinned", topo.host.pinned_bandwidth / 1e9);
  }
  size_t pick = 0;
  while (pick + 1 < labels.size() && ImGui::CalcTextSize(labels[pick].c_str()).x > width - 8) ++pick;
  std::snprintf(buf, sizeof buf, "%s", labels[pick].c_str());
  const ImVec2 label_size = ImGui::CalcTextSize(buf);
  const float label_x = origin.x + std::max(0.0f, (width - label_size.x) * 0.5f);
  dl->AddRectFilled(ImVec2(label_x - 4, link_y - line * 0.5f - 1), ImVec2(label_x + label_size.x + 4, link_y + line * 0.5f + 1), colors::kPanel);
  text_in_box(dl, ImVec2(label_x, link_y - line * 0.5f), width - (label_x - origin.x), link_col, buf);
  if (!links.fabric)
    for (const LinkSpec& l : topo.links) {  // listed pairs as arcs under the bar
      const float xa = box_x(l.a) + box_w * 0.5f, xb = box_x(l.b) + box_w * 0.5f;
      const float yb = phys_y - 2;
      dl->AddBezierCubic(ImVec2(xa, yb), ImVec2(xa, yb - line), ImVec2(xb, yb - line), ImVec2(xb, yb),
                         l.kind == LinkKind::nvlink ? colors::kNvlink : colors::kPcie, 2);
    }

  // Physical GPUs (nvidia-smi order). A GPU this process cannot see is drawn dimmed, unless the
  // lesson step asks the learner to predict what the process sees: then nothing gives it away.
  std::vector<bool> visible(static_cast<size_t>(n), hide_mapping);
  for (const VisibleDevice& d : vis.devices)
    if (d.physical_index >= 0 && d.physical_index < n) visible[static_cast<size_t>(d.physical_index)] = true;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  for (int i = 0; i < n; ++i) {
    const GpuSpec& g = topo.gpus[static_cast<size_t>(i)];
    const DeviceView* dv = i < static_cast<int>(snap.devices.size()) ? &snap.devices[static_cast<size_t>(i)] : nullptr;
    const ImVec2 a(box_x(i), phys_y), b(box_x(i) + box_w, phys_y + box_h);
    const bool on = visible[static_cast<size_t>(i)];
    dl->AddRectFilled(a, b, on ? colors::kGpuBox : with_alpha(colors::kGpuBox, 0.35f), 4);
    dl->AddRect(a, b, on ? colors::kGpuBoxBorder : colors::kGrid, 4, 0, dv && dv->used ? 2.5f : 1.0f);
    const float pad = box_w < 60 ? 2.0f : 5.0f;  // eight GPUs in a narrow panel: every pixel counts
    const float text_w = box_w - 2 * pad;
    std::snprintf(buf, sizeof buf, "GPU %d", i);
    if (ImGui::CalcTextSize(buf).x > text_w) std::snprintf(buf, sizeof buf, "%d", i);
    text_in_box(dl, ImVec2(a.x + pad, a.y + 3), text_w, on ? colors::kText : colors::kTextDim, buf);
    fit_words(short_gpu_name(g.name), text_w, buf, sizeof buf);
    if (ImGui::CalcTextSize(buf).x <= text_w)  // eight GPUs beside a lesson: the name is in the tooltip
      text_in_box(dl, ImVec2(a.x + pad, a.y + 3 + line), text_w, on ? colors::kText : colors::kTextDim, buf);
    const double gib = static_cast<double>(g.memory_bytes) / (1024.0 * 1024 * 1024);
    const std::string bus = g.pci_bus_id.size() > 9 ? g.pci_bus_id.substr(9, 2) : g.pci_bus_id;
    std::snprintf(buf, sizeof buf, "%.0f GiB  bus %s", gib, bus.c_str());
    if (ImGui::CalcTextSize(buf).x > text_w) std::snprintf(buf, sizeof buf, "%.0f GiB", gib);
    if (ImGui::CalcTextSize(buf).x > text_w) std::snprintf(buf, sizeof buf, "%.0fG", gib);
    text_in_box(dl, ImVec2(a.x + pad, a.y + 3 + 2 * line), text_w, colors::kTextDim, buf);
    if (mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y)
      ImGui::SetTooltip(tr(zh, "GPU %d (nvidia-smi): %s\n%s\nbus %s, %d SMs, %.0f GB/s memory\n%s",
                           "GPU %d（nvidia-smi）：%s\n%s\n总线 %s，%d 个 SM，显存带宽 %.0f GB/s\n%s"),
                        i, g.name.c_str(), g.uuid.c_str(), g.pci_bus_id.c_str(), g.sm_count,
                        g.memory_bandwidth / 1e9,
                        on ? tr(zh, "visible to this process", "这个进程看得到")
                           : tr(zh, "hidden from this process by CUDA_VISIBLE_DEVICES", "被 CUDA_VISIBLE_DEVICES 对这个进程隐藏了"));
  }

  if (hide_mapping) {
    const ImVec2 a(origin.x, logical_y), b(origin.x + width, logical_y + logical_h);
    dl->AddRect(a, b, colors::kGrid, 4);
    const char* note = zh ? "进程看到的设备：先回答课程里的问题，点“运行并检查”后显示"
                          : "What the process sees shows after \"Run and check\": predict it first";
    dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), ImVec2(a.x + 6, a.y + 3), colors::kWarning, note, nullptr,
                width - 12);
    return;
  }
  // Logical devices and their arrows; the arrows glide to new targets when the mapping changes.
  // As wide as the row allows (a few visible GPUs of eight get readable boxes), at most 120 px.
  const float lw = std::min(120.0f, std::max(box_w, (width - gap * static_cast<float>(std::max(0, m - 1))) / static_cast<float>(std::max(1, m))));
  const float lrow = lw * static_cast<float>(m) + gap * static_cast<float>(std::max(0, m - 1));
  const float lx0 = origin.x + std::max(0.0f, (width - lrow) * 0.5f);
  const float k = 1.0f - std::exp(-ImGui::GetIO().DeltaTime * 14.0f);
  arrow_x.resize(static_cast<size_t>(m), -1.0f);
  for (int j = 0; j < m; ++j) {
    const VisibleDevice& d = vis.devices[static_cast<size_t>(j)];
    const ImVec2 a(lx0 + static_cast<float>(j) * (lw + gap), logical_y), b(a.x + lw, logical_y + logical_h);
    dl->AddRectFilled(a, b, colors::kLogicalBox, 4);
    const float pad = lw < 60 ? 2.0f : 5.0f;
    std::snprintf(buf, sizeof buf, "cuda:%d", d.ordinal);
    if (ImGui::CalcTextSize(buf).x > lw - 2 * pad) std::snprintf(buf, sizeof buf, ":%d", d.ordinal);
    text_in_box(dl, ImVec2(a.x + pad, a.y + 3), lw - 2 * pad, colors::kText, buf);
    std::snprintf(buf, sizeof buf, "= GPU %d", d.physical_index);
    if (ImGui::CalcTextSize(buf).x > lw - 2 * pad) std::snprintf(buf, sizeof buf, "=%d", d.physical_index);
    text_in_box(dl, ImVec2(a.x + pad, a.y + 3 + line), lw - 2 * pad, colors::kTextDim, buf);
    if (mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y)
      ImGui::SetTooltip(tr(zh, "cuda:%d is physical GPU %d%s%s%s", "cuda:%d 是物理 GPU %d%s%s%s"), d.ordinal, d.physical_index,
                        d.entry.empty() ? "" : tr(zh, " (entry '", "（条目 '"), d.entry.c_str(),
                        d.entry.empty() ? "" : tr(zh, "')", "'）"));
    const float target = box_x(d.physical_index) + box_w * 0.5f;
    float& x = arrow_x[static_cast<size_t>(j)];
    x = x < 0 ? target : x + (target - x) * k;
    draw_arrow(dl, ImVec2(a.x + lw * 0.5f, a.y - 1), ImVec2(x, phys_y + box_h + 3), colors::kAllocated, 2.0f, 7.0f);
  }
  float y = logical_y + logical_h + 3;
  // Wrapped to the panel: on a narrow panel the second half would be cut off.
  dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), ImVec2(origin.x, y), colors::kTextDim, legend, nullptr, width);
  y += ImGui::CalcTextSize(legend, nullptr, false, width).y + 3;
  // Notes that still run past the diagram's area stay reachable: the window's content reaches
  // down to them, and it scrolls.
  auto reach = [&](float bottom) {
    if (bottom > origin.y + height) ImGui::Dummy(ImVec2(1, bottom - (origin.y + height)));
  };

  // The entries of CUDA_VISIBLE_DEVICES: which became which cuda:N, where the list stopped, why.
  if (chips.empty()) {
    reach(y);
    return;
  }
  dl->AddText(ImVec2(origin.x, y), colors::kTextDim, entries_label(zh));
  for (const EntryChip& c : chips) {
    const float x = origin.x + c.x, cy = y + static_cast<float>(c.row) * (line + 4);
    check_fit(c.text.c_str(), origin.x + width - x - 8);
    dl->AddRect(ImVec2(x, cy - 1), ImVec2(x + ImGui::CalcTextSize(c.text.c_str()).x + 8, cy + line + 1), c.color);
    dl->AddText(ImVec2(x + 4, cy), c.color, c.text.c_str());
  }
  y += static_cast<float>(chips.back().row) * (line + 4);
  if (vis.stop != VisibilityStop::none) {
    y += line + 4;
    std::snprintf(buf, sizeof buf, tr(zh, "entry %d: %s (hover for the rules)", "第 %d 项：%s（悬停查看规则）"),
                  vis.stop_entry, stop_text(vis.stop, zh));
    dl->AddText(ImVec2(origin.x, y), colors::kWarning, buf);
    if (mouse.y >= y && mouse.y < y + line && mouse.x >= origin.x && mouse.x < origin.x + width) {
      std::string notes;
      for (const std::string& n : vis.notes) notes += n + "\n";
      ImGui::SetTooltip("%s", notes.c_str());
    }
  }
  reach(y + line + 2);
}

}  // namespace furnace::viz
