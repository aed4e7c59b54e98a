// The host-memory estimate of a simulated run and the guard that refuses one the machine cannot
// hold. The simulator maps each device allocation with MAP_NORESERVE, so only the pages training
// writes cost host memory: the estimate counts the tensors a step writes (what the trainer and
// DataParallel allocate, by the model's sizes), capped per device at what its simulated GPU can
// hold (beyond that, PyTorch's out-of-memory error stops the run first), plus the host's own share.
#include "furnace/host_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "furnace/allocator.h"  // defines: format_size
#include "furnace/error.h"

namespace furnace {
namespace {

constexpr uint64_t kF32 = 4, kHalf = 2;

}  // namespace

uint64_t HostMemoryEstimate::total() const {
  uint64_t t = 0;
  for (const HostMemoryPart& p : parts) t += p.bytes;
  return t;
}

std::string HostMemoryEstimate::breakdown() const {
  std::vector<HostMemoryPart> sorted = parts;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.bytes > b.bytes; });
  std::string s;
  for (const HostMemoryPart& p : sorted) s += (s.empty() ? "" : "; ") + p.what;
  return s;
}

HostMemoryEstimate estimate_host_memory(const Scenario& sc, const std::vector<int>& sizes,
                                        const std::vector<std::pair<int, uint64_t>>& devices,
                                        uint64_t process_bytes, bool checkpointing) {
  FURNACE_ASSERT(sizes.size() >= 2) << "an MLP has at least two sizes";
  uint64_t params = 0, widths = 0, widest = 0, largest_weight = 0;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const uint64_t in = static_cast<uint64_t>(sizes[i]), out = static_cast<uint64_t>(sizes[i + 1]);
    params += in * out + out;
    widths += out;
    widest = std::max(widest, out);
    largest_weight = std::max(largest_weight, in * out);
  }
  const uint64_t features = static_cast<uint64_t>(sizes.front());
  const uint64_t classes = static_cast<uint64_t>(sizes.back());
  const uint64_t batch = static_cast<uint64_t>(sc.batch);
  const bool amp = sc.amp_mode() != AmpMode::off;
  const bool dp = sc.parallel_mode() == ParallelMode::dp;

  // One forward and backward over `rows`: the input, every Linear's output (kept for backward;
  // ReLU works in place), backward's two widest temporaries, probabilities and their gradient,
  // the labels; under autocast also the 16-bit copies of inputs and weights and a 16-bit gradient.
  auto activations = [&](uint64_t rows) {
    uint64_t b = rows * (features + widths) * kF32 + 2 * rows * widest * kF32 + 2 * rows * classes * kF32 + rows * kF32;
    if (amp) b += rows * (features + widths) * kHalf + params * kHalf + largest_weight * kHalf;
    return b;
  };

  // Each device's allocations in the order a step makes them. A device whose GPU cannot hold
  // them all stops the run with PyTorch's out-of-memory error at the first one that does not fit:
  // only what came before it was ever written.
  std::vector<uint64_t> param_tensors;  // the model, layer by layer (weight, bias)
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    param_tensors.push_back(static_cast<uint64_t>(sizes[i]) * static_cast<uint64_t>(sizes[i + 1]) * kF32);
    param_tensors.push_back(static_cast<uint64_t>(sizes[i + 1]) * kF32);
  }
  HostMemoryEstimate e;
  bool oom = false;
  const uint64_t k = std::max<uint64_t>(devices.size(), 1);
  const uint64_t rows = dp ? (batch + k - 1) / k : batch;  // torch.chunk: ceil(B / k) rows
  for (size_t i = 0; i < devices.size(); ++i) {
    const bool master = !dp || i == 0;
    const bool replicated = dp && devices.size() > 1;
    const uint64_t p = master ? params * kF32 : 0;                     // the model's parameters
    const uint64_t g = master ? params * kF32 : 0;                     // their .grad
    // The optimizer's state: SGD's momentum buffers, AdamW's exp_avg and exp_avg_sq.
    const uint64_t state_copies = sc.optimizer_kind() == OptimizerKind::adamw ? 2 : sc.momentum > 0 ? 1 : 0;
    const uint64_t m = master ? state_copies * params * kF32 : 0;
    const uint64_t replica = replicated ? 2 * params * kF32 : 0;       // broadcast copy + its grads
    uint64_t act = activations(rows);
    if (dp && i == 0) act += 2 * batch * classes * kF32;  // gathered outputs and their gradient
    std::vector<uint64_t> order;
    if (master) order = param_tensors;
    if (replicated) order.push_back(params * kF32);
    order.push_back(act);
    if (replicated) order.push_back(params * kF32);
    order.push_back(g);
    order.push_back(m);
    const uint64_t need = p + g + m + replica + act;
    uint64_t held = 0;
    for (uint64_t bytes : order) {
      if (bytes > devices[i].second - held) break;
      held += bytes;
    }
    std::ostringstream what;
    what << "cuda:" << devices[i].first << " " << format_size(held);
    if (held < need) {
      oom = true;
      what << " (until its GPU runs out of memory: the run needs " << format_size(need) << " there and stops "
           << "with PyTorch's out-of-memory error)";
    } else if (master) {
      what << " (parameters " << format_size(p) << ", gradients " << format_size(g) << ", optimizer state "
           << format_size(m) << (replica ? ", replica " + format_size(replica) : std::string()) << ", activations "
           << format_size(act) << ")";
    } else {
      what << " (replica " << format_size(replica) << ", activations " << format_size(act) << ")";
    }
    e.parts.push_back({what.str(), held});
  }
  // The sim backend multiplies 16-bit matrices through f32 copies of both operands and the result.
  if (amp && !oom) {
    const uint64_t scratch = 3 * largest_weight * kF32;
    e.parts.push_back({"autocast scratch " + format_size(scratch), scratch});
  }
  const uint64_t prefetch = sc.workers > 0 ? static_cast<uint64_t>(sc.prefetch_factor > 0 ? sc.prefetch_factor : 2) : 0;
  const uint64_t in_flight = (1 + static_cast<uint64_t>(sc.workers) * prefetch) * batch * (features + 1) * kF32;
  e.parts.push_back({"loader batches " + format_size(in_flight), in_flight});
  if (checkpointing && !oom) {  // host copies of parameters and optimizer state, and the file's bytes
    const uint64_t ck = 2 * (sc.optimizer_kind() == OptimizerKind::adamw ? 3 : 2) * params * kF32;
    e.parts.push_back({"checkpoint " + format_size(ck), ck});
  }
  e.parts.push_back({"this process now (code, libraries, the dataset) " + format_size(process_bytes), process_bytes});
  return e;
}

uint64_t host_memory_resident() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(f >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

void check_host_memory(const HostMemoryEstimate& estimate, const HostMemoryBudget& budget) {
  const uint64_t need = estimate.total();
  const char* advice = "; use a smaller --hidden or --batch, or fewer devices";
  if (!budget.known) {
    FURNACE_CHECK(need <= kUnknownBudgetAllowance)
        << "this scenario needs about " << format_size(need) << " of host memory and how much this process "
        << "may use is " << budget.source << ": scenarios over " << format_size(kUnknownBudgetAllowance)
        << " are refused rather than risk the OOM killer [" << estimate.breakdown() << "]" << advice;
    return;
  }
  FURNACE_CHECK(need <= budget.bytes)
      << "this scenario needs about " << format_size(need) << " of host memory and this machine has "
      << format_size(budget.bytes) << " available (" << budget.source << "): the simulator keeps "
      << "every simulated GPU's tensors in host RAM [" << estimate.breakdown() << "]" << advice;
}

}  // namespace furnace
