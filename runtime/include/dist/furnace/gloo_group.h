// furnace/gloo_group.h: ProcessGroupGloo, a ProcessGroup whose ranks are separate processes (on
// one machine or several) joined by Gloo, PyTorch's own CPU collective library, over TCP. The
// ranks find each other through a TcpStore (furnace/tcp_store.h): each publishes the address its
// Gloo device listens on, then every pair connects (Gloo's full mesh). all_reduce is Gloo's ring
// (reduce-scatter then all-gather: every rank gets the same bits, summed in the ring's order, not
// rank order as make_thread_group's; the two agree within fp32 reassociation, and exactly for two
// ranks, where a + b = b + a).
//
// Each collective (all_reduce_max too) first all-reduces a small header (what it is, its size and
// root, each rank's device clock, GPU and node) so that ranks calling different collectives get
// one clear error on every rank instead of Gloo's hang or corrupt result, and so that the modelled
// clock starts the collective when the last rank reaches it, as the thread group does. The
// collective runs on the caller's thread (the host waits, as Gloo's CPU path does); on the
// modelled device clock it runs on kCommStream, overlapping backward as NCCL's kernel does.
//
// A rank that dies closes its sockets: every other rank's pending or next collective fails at once
// ("connection closed"); a rank that hangs makes the others fail after the timeout. Either way the
// group is then broken: every later call fails with the same line. Making a group ignores SIGPIPE
// (unless the program handles it), as Python does at startup: a write to a dead peer is Gloo's
// error, not this process's death.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "furnace/process_group.h"  // defines: ProcessGroup
#include "furnace/tcp_store.h"      // defines: TcpStore
#include "furnace/topology.h"       // defines: Topology

namespace furnace {

struct GlooGroupOptions {
  // torch.distributed.init_process_group(timeout=): every collective and the connection set-up.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // The address this rank's Gloo device listens on for its peers: GLOO_SOCKET_IFNAME's interface
  // when `iface` is set, else `hostname` (127.0.0.1 for a one-node job).
  std::string hostname = "127.0.0.1";
  std::string iface;
  // The machine each rank's GPU belongs to (every node the same machine), for the modelled clock;
  // `node` is this rank's node (GROUP_RANK). Unset: nothing is modelled.
  const Topology* topology = nullptr;
  int node = 0;
};

// The host's own small collectives between the ranks, off the modelled clock: a job's control
// (did any rank get a stop signal, each rank's report for rank 0).
class GlooGroup : public ProcessGroup {
 public:
  // Every rank's `values` (the same length on every rank) become their elementwise maximum. It
  // carries the collectives' header: another collective, or another length, on some rank is the
  // one-line mismatch on every rank.
  virtual void all_reduce_max(std::vector<double>& values) = 0;
};

// Joins the group as `rank` of `size`; every rank calls it with a store at the same address.
// Throws furnace::Error, one line, when the others do not arrive within the timeout or the device
// cannot listen on the address.
std::unique_ptr<GlooGroup> make_gloo_group(TcpStore& store, int rank, int size, GlooGroupOptions options = {});

// The modelled time of a collective of `bytes` among `ranks` ranks on different nodes, over the
// network: an all-reduce is NCCL's ring (2(n-1)/n x bytes at the network's bandwidth plus a hop
// latency for each of its 2(n-1) steps) or its double binary tree (about 2 x bytes, but 2 log2(n)
// hops), whichever is faster, as NCCL's tuner picks; a broadcast is the pipelined ring (bytes plus
// n-1 hops). The network is not in the topology files; this assumes 100 Gb/s per node
// (InfiniBand HDR100 or 100 GbE: 12.5 GB/s) and 5 us per hop, and that it, not the GPUs' links
// inside a node, is the slowest link.
struct NetworkAllReduce {
  double seconds = 0;
  const char* algorithm = "ring";  // "ring", "tree" ("none" for one rank)
};
NetworkAllReduce model_network_all_reduce(int ranks, double bytes);
double model_network_all_reduce_seconds(int ranks, double bytes);
double model_network_broadcast_seconds(int ranks, double bytes);

}  // namespace furnace
