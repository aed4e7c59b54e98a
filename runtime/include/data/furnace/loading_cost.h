// furnace/loading_cost.h: what the host (a CPU core) spends to load samples in PyTorch's
// DataLoader, per dataset kind: fetching one sample (Dataset.__getitem__: read, decode, transform,
// augment) and its share of collating the batch (default_collate's torch.stack). The simulator puts
// these on the modelled clock (train/loading_timeline.h); they are not measured on the machine
// that runs Furnace. The figures, how they were measured and what they leave out:
// docs/host-loading.md (tools/measure_loading_cost.py).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace furnace {

struct LoadingCost {
  std::string name;             // "tensors", "torchvision"
  std::string what;             // the PyTorch code it stands for, one line
  double fetch_s = 0;           // one __getitem__, seconds
  double collate_per_sample_s = 0;  // default_collate, seconds per sample of the batch
};

// "tensors" or "torchvision"; nullopt for any other name ("off" means not modelled).
std::optional<LoadingCost> loading_cost(const std::string& name);
std::vector<std::string> loading_cost_names();
// Seconds one worker (or the main process) spends producing a batch of `samples`.
double batch_loading_seconds(const LoadingCost& cost, int64_t samples);

}  // namespace furnace
