// dist/network_model: the modelled time of a collective between nodes (furnace/gloo_group.h).
#include "furnace/gloo_group.h"

namespace furnace {
namespace {

constexpr double kNetworkBytesPerSecond = 100e9 / 8;  // 100 Gb/s per node
constexpr double kHopSeconds = 5e-6;

}  // namespace

double model_network_all_reduce_seconds(int ranks, double bytes) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  // A reduce-scatter and an all-gather, n - 1 steps each.
  return 2 * (n - 1) / n * bytes / kNetworkBytesPerSecond + 2 * (n - 1) * kHopSeconds;
}

double model_network_broadcast_seconds(int ranks, double bytes) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  // Pipelined along the ring: every byte crosses one link at a time, as model_ring_broadcast_seconds.
  return bytes / kNetworkBytesPerSecond + (n - 1) * kHopSeconds;
}

}  // namespace furnace
