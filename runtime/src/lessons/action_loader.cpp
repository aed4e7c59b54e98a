// action_loader.cpp: the `loader` lesson action: torch.utils.data.DataLoader alone (furnace/
// loader.h) over the Fashion-MNIST slice the `train` action uses, shuffled as training shuffles
// it: how many batches an epoch has, how many the workers have in flight before and after the
// first batch is taken (prefetching), whether batches come pinned, and which samples the first
// batch holds. Not here: the copies to the GPU and their modelled time (the `train` action's
// h2d_ms).
#include <algorithm>

#include "furnace/data.h"     // defines: load_mnist_split
#include "furnace/loader.h"   // defines: DataLoader
#include "furnace/scenario_options.h"  // defines: loader_options
#include "lessons/actions.h"  // defines: run_loader, lesson_data_dir

namespace furnace::lesson::detail {

void run_loader(const StepScenario& s, Observables& out) {
  const Scenario& sc = s.scenario;
  const ImageDataset data = load_mnist_split(lesson_data_dir(), "train");
  const ImageDatasetView view(data);
  DataLoader loader(view, loader_options(sc));  // what the training run builds  // PyTorch's ValueErrors for a bad combination come from here
  out["batches"] = Value::of_int(loader.num_batches());
  out["prefetched"] = Value::of_int(loader.in_flight());

  Batch first;
  if (!loader.next(first)) return;
  out["in_flight"] = Value::of_int(loader.in_flight());
  out["pinned"] = Value::of_bool(first.pinned);
  const size_t shown = std::min<size_t>(8, first.sample_indices.size());
  out["first_indices"] = Value::of_ints(
      std::vector<int64_t>(first.sample_indices.begin(), first.sample_indices.begin() + static_cast<std::ptrdiff_t>(shown)));

  Batch last = first;
  while (loader.next(last)) {
  }
  out["last_batch"] = Value::of_int(last.size);
}

}  // namespace furnace::lesson::detail
