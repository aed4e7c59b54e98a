// Backend helpers shared by every backend: names and the timing model.
#include "furnace/backend.h"

#include <algorithm>

namespace furnace {

const char* copy_kind_name(CopyKind k) {
  switch (k) {
    case CopyKind::h2d: return "h2d";
    case CopyKind::d2h: return "d2h";
    case CopyKind::d2d: return "d2d";
    case CopyKind::peer: return "peer";
  }
  return "?";
}

// A kernel is bound either by arithmetic or by memory traffic (the roofline), plus the launch.
double model_kernel_seconds(const GpuSpec& gpu, const KernelCost& cost) {
  double compute = cost.flops > 0 ? cost.flops / gpu.peak_flops(cost.dtype) : 0.0;
  double memory = cost.bytes > 0 ? cost.bytes / gpu.memory_bandwidth : 0.0;
  return std::max(compute, memory) + gpu.launch_latency_s;
}

double model_copy_seconds(double bytes, double bandwidth, double latency_s) {
  return bytes / bandwidth + latency_s;
}

}  // namespace furnace
