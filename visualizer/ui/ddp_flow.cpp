// DDP flow: bucket figures from a step's all-reduce events and DDP's bucket rule.
#include "ddp_flow.h"

#include <algorithm>
#include <cstring>

#include "furnace/ddp_buckets.h"  // defines: ddp_rebuilt_buckets, ddp_initial_buckets, mlp_gradient_ready_order
#include "furnace/nn.h"           // defines: mlp_parameter_shapes

namespace furnace::viz {

namespace {

// model.parameters() of MLP inputs-hidden-classes (furnace/nn.h's names) with their gradients'
// bytes (f32).
struct MlpParams {
  std::vector<std::string> names;
  std::vector<size_t> bytes;
};

MlpParams mlp_params(const std::vector<int>& hidden, int inputs, int classes) {
  std::vector<int> sizes{inputs};
  sizes.insert(sizes.end(), hidden.begin(), hidden.end());
  sizes.push_back(classes);
  MlpParams p;
  for (const ParameterShape& s : mlp_parameter_shapes(sizes)) {
    p.names.push_back(s.name);
    p.bytes.push_back(static_cast<size_t>(s.numel) * sizeof(float));
  }
  return p;
}

std::vector<DdpBuckets::value_type> bucket_indices(const MlpParams& p, double bucket_cap_mb, bool rebuilt) {
  return rebuilt ? ddp_rebuilt_buckets(mlp_gradient_ready_order(p.names.size()), p.bytes, ddp_bucket_cap_bytes(bucket_cap_mb))
                 : ddp_initial_buckets(p.names.size());
}

}  // namespace

std::vector<std::vector<std::string>> ddp_bucket_params(const std::vector<int>& hidden, double bucket_cap_mb,
                                                        bool rebuilt, int inputs, int classes) {
  const MlpParams p = mlp_params(hidden, inputs, classes);
  std::vector<std::vector<std::string>> out;
  for (const auto& b : bucket_indices(p, bucket_cap_mb, rebuilt)) {
    out.emplace_back();
    for (size_t i : b) out.back().push_back(p.names[i]);
  }
  return out;
}

DdpStepFigures ddp_step_figures(const StepPhases& step, const std::vector<int>& hidden, double bucket_cap_mb) {
  DdpStepFigures f;
  std::vector<int> ranks;
  const PhaseSpan* backward0 = nullptr;  // rank 0's (the lowest device's) backward
  for (const PhaseSpan& s : step.spans) {
    if (std::strcmp(s.name, "backward") != 0) continue;
    if (std::find(ranks.begin(), ranks.end(), s.device) == ranks.end()) ranks.push_back(s.device);
    if (!backward0 || s.device < backward0->device) backward0 = &s;
  }
  f.world = static_cast<int>(ranks.size());
  if (step.all_reduces.empty() || f.world == 0) return f;
  const int rank0 = backward0->device;
  f.backward_s = backward0->dur;
  double comm = 0, exposed = 0;
  for (const CommSpan& c : step.all_reduces) {
    comm += c.dur;
    if (c.device != rank0) continue;
    DdpBucketFigures b;
    b.bytes = c.bytes;
    b.start = c.start;
    b.dur = c.dur;
    b.ready = backward0->dur > 0 ? static_cast<double>(std::clamp((c.start - backward0->start) / backward0->dur, 0.0, 1.0)) : 0.0;
    f.bytes += c.bytes;
    f.buckets.push_back(b);
  }
  for (const CommSpan& w : step.comm_waits) exposed += w.dur;
  f.comm_s = comm / f.world;
  f.exposed_s = exposed / f.world;
  f.hidden_share = comm > 0 ? std::clamp(1.0 - exposed / comm, 0.0, 1.0) : 0.0;
  f.sent_bytes = static_cast<uint64_t>(static_cast<double>(f.bytes) * 2.0 * (f.world - 1) / f.world);
  // Which gradients: DDP's rule for this MLP, iteration 1's bucket or the rebuilt ones, whichever
  // gives exactly the bytes the run all-reduced.
  const MlpParams params = mlp_params(hidden, 784, 10);
  for (bool rebuilt : {true, false}) {
    const auto layout = bucket_indices(params, bucket_cap_mb, rebuilt);
    if (layout.size() != f.buckets.size()) continue;
    bool same = true;
    for (size_t b = 0; b < layout.size() && same; ++b) {
      uint64_t n = 0;
      for (size_t i : layout[b]) n += params.bytes[i];
      same = n == f.buckets[b].bytes;
    }
    if (!same) continue;
    for (size_t b = 0; b < layout.size(); ++b)
      for (size_t i : layout[b]) f.buckets[b].params.push_back(params.names[i]);
    break;
  }
  return f;
}

}  // namespace furnace::viz
