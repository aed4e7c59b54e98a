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

namespace {

// The ring's slowest link: the lowest bandwidth and the highest latency of its hops.
LinkSpec slowest_link(const Topology& topology, const std::vector<int>& ring) {
  LinkSpec slowest{0, 0, LinkKind::local, 0.0, 0.0};
  for (size_t i = 0; i < ring.size(); ++i) {
    const LinkSpec l = topology.link_between(ring[i], ring[(i + 1) % ring.size()]);
    if (i == 0 || l.bandwidth < slowest.bandwidth) slowest.bandwidth = l.bandwidth;
    slowest.latency_s = std::max(slowest.latency_s, l.latency_s);
  }
  return slowest;
}

}  // namespace

double model_ring_all_reduce_seconds(const Topology& topology, const std::vector<int>& ring, double bytes) {
  const size_t n = ring.size();
  if (n < 2) return 0.0;
  const LinkSpec link = slowest_link(topology, ring);
  const double steps = 2.0 * static_cast<double>(n - 1);
  return steps * model_copy_seconds(bytes / static_cast<double>(n), link.bandwidth, link.latency_s);
}

double model_ring_broadcast_seconds(const Topology& topology, const std::vector<int>& ring, double bytes) {
  const size_t n = ring.size();
  if (n < 2) return 0.0;
  const LinkSpec link = slowest_link(topology, ring);
  return bytes / link.bandwidth + static_cast<double>(n - 1) * link.latency_s;
}

}  // namespace furnace
