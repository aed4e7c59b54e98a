// train/ddp_job: see ddp_job.h.
#include "train/ddp_job.h"

#include <algorithm>

#include "furnace/error.h"
#include "train/idle_time.h"  // defines: idle_seconds

namespace furnace {

DdpRankSummary summarize_rank(const TrainResult& r) {
  FURNACE_CHECK(r.ddp && !r.ddp->ranks.empty()) << "a --parallel ddp rank finished without its DDP report";
  DdpRankSummary s;
  s.train_samples = r.train_samples;
  s.modelled_s = r.modelled_s;
  s.modelled_step_s = r.modelled_step_s;
  s.report = r.ddp->ranks.at(0);
  return s;
}

TrainResult combine_ddp_ranks(TrainResult out, const std::vector<DdpRankSummary>& ranks,
                              const std::vector<bool>& same_node_as_rank0, double wall_s) {
  FURNACE_CHECK(out.ddp.has_value()) << "a --parallel ddp rank finished without its DDP report";
  out.train_samples = 0;
  out.modelled_s = 0;
  out.modelled_step_s = 0;
  for (const DdpRankSummary& r : ranks) {
    out.train_samples += r.train_samples;
    out.modelled_s = std::max(out.modelled_s, r.modelled_s);
    out.modelled_step_s = std::max(out.modelled_step_s, r.modelled_step_s);
  }
  out.wall_s = wall_s;
  out.samples_per_s = wall_s > 0 ? static_cast<double>(out.train_samples) / wall_s : 0;
  DdpReport& report = *out.ddp;
  report.ranks.clear();
  report.step_s = out.modelled_step_s;
  double comm = 0, exposed = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    DdpRankReport rank = ranks[i].report;
    rank.idle_s = idle_seconds(report.step_s, rank.busy_s - (rank.comm_s - rank.exposed_s));
    comm += rank.comm_s;
    exposed += rank.exposed_s;
    report.ranks.push_back(rank);
    // Each GPU as its rank used it (a rank's process touches only its own GPU).
    if (i < same_node_as_rank0.size() && same_node_as_rank0[i])
      for (DeviceMemoryReport& m : out.memory)
        if (m.device == rank.device) m = rank.memory;
  }
  report.hidden_share = comm > 0 ? std::clamp(1.0 - exposed / comm, 0.0, 1.0) : 0.0;
  return out;
}

}  // namespace furnace
