// furnace-viz DDP flow: what one DistributedDataParallel step did, read from its trace: each
// bucket's bytes and ring all-reduce (the run's all_reduce events on the ranks' communication
// streams), which gradients it holds (DDP's own bucket rule, furnace/ddp_buckets.h, applied to the
// run's MLP and kept only when it gives the events' bytes), and how much of the communication
// backward hid (DdpReport's hidden_share, per step). Pure logic: no ImGui.
// Not here: drawing (step_flow_panel.cpp), the events' grouping (model.h, step_flow.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapshot.h"  // defines: StepPhases, CommSpan

namespace furnace::viz {

struct DdpBucketFigures {
  uint64_t bytes = 0;               // the bucket's flat buffer, as every rank all-reduced it
  std::vector<std::string> params;  // its gradients in the order they became ready ("4.bias", ...);
                                    // empty when DDP's rule does not give the events' bytes
  double start = 0, dur = 0;        // rank 0's all-reduce on the communication stream (modelled)
  double ready = 0;                 // 0..1: where in rank 0's backward it started
};

struct DdpStepFigures {
  int world = 0;                    // ranks (devices with a backward in the step)
  std::vector<DdpBucketFigures> buckets;  // in all-reduce order
  uint64_t bytes = 0;               // all-reduced per rank in the step
  uint64_t sent_bytes = 0;          // what each rank sends for it over the ring: 2(n-1)/n of that
  double comm_s = 0;                // per rank: all-reduce time on the communication stream
  double exposed_s = 0;             // per rank: what the compute stream waited for at the end of backward
  double hidden_share = 0;          // of the all-reduce time, the share hidden behind backward
  double backward_s = 0;            // rank 0's backward phase, the wait included
};

// The buckets DDP builds for an MLP 784-hidden-10 (parameters "0.weight", "0.bias", "2.weight",
// ...): `rebuilt` false gives iteration 1's single bucket, true the buckets rebuilt from the
// gradients' ready order with bucket_cap_mb. Parameter names per bucket, in all-reduce order.
std::vector<std::vector<std::string>> ddp_bucket_params(const std::vector<int>& hidden, double bucket_cap_mb,
                                                        bool rebuilt, int inputs = 784, int classes = 10);

// The figures of `step` (a DDP step: all_reduces set by SnapshotBuilder); an empty `buckets` when
// the step has no all-reduce.
DdpStepFigures ddp_step_figures(const StepPhases& step, const std::vector<int>& hidden, double bucket_cap_mb);

}  // namespace furnace::viz
