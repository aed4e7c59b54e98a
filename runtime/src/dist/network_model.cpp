// dist/network_model: the modelled time of a collective between nodes (furnace/gloo_group.h).
#include "furnace/gloo_group.h"

#include <cmath>

namespace furnace {
namespace {

constexpr double kNetworkBytesPerSecond = 100e9 / 8;  // 100 Gb/s per node
constexpr double kHopSeconds = 5e-6;

}  // namespace

NetworkAllReduce model_network_all_reduce(int ranks, double bytes) {
  if (ranks <= 1) return {0, "none"};
  const double n = ranks;
  // Ring: a reduce-scatter and an all-gather, n - 1 steps each.
  const double ring = 2 * (n - 1) / n * bytes / kNetworkBytesPerSecond + 2 * (n - 1) * kHopSeconds;
  // NCCL's double binary tree between nodes: each half of the data is reduced up one tree and
  // broadcast down it, pipelined, so every byte crosses a node's link about twice, and a chunk
  // takes 2 log2(n) hops instead of the ring's 2(n - 1). NCCL's tuner picks the faster of the two
  // for each size: the tree for small messages over many nodes, the ring for large ones.
  const double depth = std::ceil(std::log2(n));
  const double tree = 2 * bytes / kNetworkBytesPerSecond + 2 * depth * kHopSeconds;
  return tree < ring ? NetworkAllReduce{tree, "tree"} : NetworkAllReduce{ring, "ring"};
}

double model_network_all_reduce_seconds(int ranks, double bytes) { return model_network_all_reduce(ranks, bytes).seconds; }

double model_network_broadcast_seconds(int ranks, double bytes) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  // Pipelined along the ring: every byte crosses one link at a time, as model_ring_broadcast_seconds.
  return bytes / kNetworkBytesPerSecond + (n - 1) * kHopSeconds;
}

}  // namespace furnace
