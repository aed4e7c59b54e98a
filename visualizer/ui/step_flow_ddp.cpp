// Step flow, DDP: buckets filling, ring all-reduce, the bucket legend.
#include "step_flow_ddp.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "lang.h"      // defines: tr
#include "panels.h"    // defines: human_seconds, draw_arrow
#include "text_fit.h"  // defines: text_in_box
#include "theme.h"     // defines: colors::*, stage_color, with_alpha

namespace furnace::viz {

std::string mebibytes(uint64_t bytes) {
  char buf[32];
  // MiB, as `furnace train` prints the buckets and the Memory panel its bars.
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / 1048576.0);
  return buf;
}

void draw_ddp_buckets_filling(ImDrawList* dl, const GpuRow& row, const DdpStepFigures& f, float p) {
  const size_t nb = f.buckets.size();
  if (nb == 0) return;
  const ImU32 col = stage_color(StageKind::all_reduce);
  const float w = std::min(row.box_w - 8, 60.0f), h = row.token_h * 0.7f;
  for (size_t i = 0; i < row.devices.size(); ++i) {
    const ImVec2 top = row.top(static_cast<int>(i));
    double from = 0;
    for (size_t b = 0; b < nb; ++b) {  // bucket 0 (the last layers) lowest, as it fills first
      const double to = std::max(f.buckets[b].ready, from);
      const float fill = to > from ? std::clamp(static_cast<float>((p - from) / (to - from)), 0.0f, 1.0f) : (p >= to ? 1.0f : 0.0f);
      from = to;
      const float y1 = top.y - 4 - static_cast<float>(b) * (h + 3), y0 = y1 - h;
      const ImVec2 a(top.x - w * 0.5f, y0), c(top.x + w * 0.5f, y1);
      dl->AddRect(a, c, with_alpha(col, 0.8f), 2);
      dl->AddRectFilled(a, ImVec2(a.x + w * fill, c.y), with_alpha(col, 0.85f), 2);
    }
  }
}

void draw_ddp_ring(ImDrawList* dl, const GpuRow& row, int world, float p, ImU32 col) {
  const int n = static_cast<int>(row.devices.size());
  if (n < 2) return;
  const ImU32 path = with_alpha(col, 0.6f);
  char chunk[32];
  std::snprintf(chunk, sizeof chunk, "1/%d", std::max(world, 1));  // a ring step moves bytes / world
  const float ty = row.y - row.token_h * 0.5f - 4;
  for (int i = 0; i + 1 < n; ++i) {  // left to right over the boxes' tops
    const ImVec2 from(row.top(i).x + 6, ty), to(row.top(i + 1).x - 6, ty);
    draw_arrow(dl, from, to, path, 2.0f, 7.0f);
    const ImVec2 at(from.x + (to.x - from.x) * p, ty);
    const ImVec2 s = ImGui::CalcTextSize(chunk);
    dl->AddRectFilled(ImVec2(at.x - s.x * 0.5f - 3, at.y - s.y * 0.5f), ImVec2(at.x + s.x * 0.5f + 3, at.y + s.y * 0.5f), col, 3);
    dl->AddText(ImVec2(at.x - s.x * 0.5f, at.y - s.y * 0.5f), colors::rgb(20, 20, 24), chunk);
  }
  // The last GPU back to the first, under the boxes: the ring closes.
  const float below = row.y + row.box_h + 7;
  const ImVec2 last = row.bottom(n - 1), first = row.bottom(0);
  dl->AddLine(ImVec2(last.x, last.y + 1), ImVec2(last.x, below), path, 2.0f);
  dl->AddLine(ImVec2(last.x, below), ImVec2(first.x, below), path, 2.0f);
  draw_arrow(dl, ImVec2(first.x, below), ImVec2(first.x, first.y + 2), path, 2.0f, 7.0f);
  const float x = last.x + (first.x - last.x) * p;
  dl->AddCircleFilled(ImVec2(x, below), 4.0f, col);
}

float draw_ddp_bucket_legend(ImDrawList* dl, ImVec2 at, float width, const DdpStepFigures& f, int current, bool zh) {
  const float line = ImGui::GetTextLineHeight();
  float y = at.y;
  char buf[256];
  for (size_t b = 0; b < f.buckets.size(); ++b) {
    const DdpBucketFigures& k = f.buckets[b];
    std::string params;
    for (const std::string& p : k.params) params += (params.empty() ? "" : " ") + p;
    std::snprintf(buf, sizeof buf, tr(zh, "bucket %zu: %s  %s  all-reduce %s", "桶 %zu：%s  %s  all-reduce %s"), b + 1,
                  mebibytes(k.bytes).c_str(), params.c_str(), human_seconds(k.dur).c_str());
    const bool on = static_cast<int>(b) == current;
    if (on) dl->AddRectFilled(ImVec2(at.x - 2, y), ImVec2(at.x + width, y + line), with_alpha(stage_color(StageKind::all_reduce), 0.25f), 2);
    text_in_box(dl, ImVec2(at.x, y), width, on ? colors::kText : colors::kTextDim, buf);
    y += line;
  }
  return y - at.y;
}

std::string ddp_summary(const DdpStepFigures& f, double step_s, bool zh) {
  std::string sizes;
  for (const DdpBucketFigures& b : f.buckets) sizes += (sizes.empty() ? "" : ", ") + mebibytes(b.bytes);
  char buf[384];
  std::snprintf(buf, sizeof buf,
                tr(zh, "one step = %s of modelled device time; %d ranks, %zu bucket%s (%s), each rank sends %s over the ring; "
                       "all-reduce %s per rank, %.0f%% hidden behind backward (%s exposed)",
                   "一步 = 建模设备时间 %s；%d 个进程，%zu 个桶%s（%s），每个进程在环上发送 %s；"
                   "每个进程 all-reduce %s，其中 %.0f%% 藏在 backward 后面（露出 %s）"),
                human_seconds(step_s).c_str(), f.world, f.buckets.size(), zh ? "" : (f.buckets.size() == 1 ? "" : "s"), sizes.c_str(),
                mebibytes(f.sent_bytes).c_str(), human_seconds(f.comm_s).c_str(), 100.0 * f.hidden_share,
                human_seconds(f.exposed_s).c_str());
  return buf;
}

}  // namespace furnace::viz
