// The host's per-sample loading costs (furnace/loading_cost.h). CPU time per sample measured with
// PyTorch 1.13 on one core of the build machine (AMD EPYC), tools/measure_loading_cost.py; see
// docs/host-loading.md for the method and the caveats.
#include "furnace/loading_cost.h"

namespace furnace {
namespace {

const std::vector<LoadingCost>& table() {
  static const std::vector<LoadingCost> costs = {
      // TensorDataset(x, y) of tensors already in memory: ds[i] is two indexing ops in Python.
      {"tensors", "TensorDataset(images, labels)[i] (tensors already in memory) + default_collate",
       5.5e-6, 2.0e-6},
      // torchvision.datasets.FashionMNIST(transform=Compose([ToTensor(), Normalize(...)])): a
      // PIL image per sample, ToTensor, Normalize. About 24 us measured for the tensor work; 4 us
      // added for PIL's Image.fromarray and the np.array of the image (PIL is not installed here).
      {"torchvision", "FashionMNIST(transform=Compose([ToTensor(), Normalize(...)]))[i] + default_collate",
       28e-6, 0.5e-6},
  };
  return costs;
}

}  // namespace

std::optional<LoadingCost> loading_cost(const std::string& name) {
  for (const LoadingCost& c : table())
    if (c.name == name) return c;
  return std::nullopt;
}

std::vector<std::string> loading_cost_names() {
  std::vector<std::string> names;
  for (const LoadingCost& c : table()) names.push_back(c.name);
  return names;
}

double batch_loading_seconds(const LoadingCost& cost, int64_t samples) {
  return static_cast<double>(samples) * (cost.fetch_s + cost.collate_per_sample_s);
}

}  // namespace furnace
