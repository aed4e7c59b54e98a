// furnace-viz Step flow, DistributedDataParallel's pictures: the gradient buckets filling on every
// GPU during backward, one bucket's ring all-reduce as arrows from GPU to GPU, the buckets'
// legend and the step's communication figures. Called by StepFlowPanel with the row of GPU boxes
// it laid out. Not here: the stages (step_flow.h), the figures (ddp_flow.h).
#pragma once

#include <vector>

#include <imgui.h>

#include "ddp_flow.h"   // defines: DdpStepFigures
#include "step_flow.h"  // defines: Stage

namespace furnace::viz {

// The row of GPU boxes StepFlowPanel drew: box i (devices[i]) spans x0 + i * (box_w + gap).
struct GpuRow {
  std::vector<int> devices;
  float x0 = 0, y = 0, box_w = 0, box_h = 0, gap = 0;
  float token_h = 0;
  ImVec2 top(int i) const { return ImVec2(x0 + static_cast<float>(i) * (box_w + gap) + box_w * 0.5f, y); }
  ImVec2 bottom(int i) const { return ImVec2(top(i).x, y + box_h); }
};

// Backward: each GPU's buckets filling, bucket b full when its all-reduce started (`p`: the
// transition, 0..1 of the backward phase).
void draw_ddp_buckets_filling(ImDrawList* dl, const GpuRow& row, const DdpStepFigures& f, float p);
// One bucket's ring all-reduce: an arrow from every GPU to the next, the last back to the first,
// with a chunk (bytes / world) moving along each.
void draw_ddp_ring(ImDrawList* dl, const GpuRow& row, int world, float p, ImU32 col);
// The buckets, one line each (bytes, gradients, all-reduce time), `current` highlighted (-1: none),
// from `at` down; returns the height used.
float draw_ddp_bucket_legend(ImDrawList* dl, ImVec2 at, float width, const DdpStepFigures& f, int current, bool zh);
// The step's figures in one sentence: its modelled time (`step_s`), the buckets, the bytes each
// rank sends, the all-reduce time per rank and the share backward hid.
std::string ddp_summary(const DdpStepFigures& f, double step_s, bool zh);
// "1.02 MiB": DDP's bucket sizes in MiB, as `furnace train` and the Memory panel print sizes.
std::string mebibytes(uint64_t bytes);

}  // namespace furnace::viz
