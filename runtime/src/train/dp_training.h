// train/dp_training: the DataParallel side of the training loop (`--parallel dp`): wraps the model,
// runs one step (labels to the loss device, DataParallel forward, loss on the gathered output,
// backward, optimizer on device_ids[0]) and reports the per-device breakdown of modelled time.
// Not here: the loop, data and evaluation (training_run.cpp); DataParallel itself (furnace/parallel.h).
#pragma once

#include <functional>
#include <memory>

#include "furnace/loader.h"    // defines: Batch
#include "furnace/nn.h"        // defines: MLP, SGD, CrossEntropyLoss
#include "furnace/parallel.h"  // defines: DataParallel
#include "furnace/train.h"     // defines: Scenario, DpReport

namespace furnace {

class DpTraining {
 public:
  // Wraps `model` (already on sc.device) as DataParallel(model, sc.device_ids, sc.output_device).
  // PyTorch's errors keep their words; the device list is added in parentheses. Under the
  // imbalance warning, a line says which GPUs its numbers are in `process`.
  DpTraining(Runtime& rt, MLP& model, const Scenario& sc, const ProcessRecord& process);

  struct StepResult {
    float loss = 0;
    double accuracy = -1;
  };
  // One forward and backward through DataParallel: labels to the loss device, out = dp(inputs)
  // under `autocast`, loss on the gathered output, backward of loss * dloss (the GradScaler's
  // scale and 1/accum), gradients reduce-added onto device_ids[0]. No optimizer step.
  StepResult micro_step(CrossEntropyLoss& criterion, const Batch& batch, float dloss,
                        DType autocast, bool track_accuracy, int64_t step);
  // Runs `fn` (zero_grad, or the scaler's unscale / step / update) on device_ids[0], where the
  // parameters, .grad and optimizer state live, as the optimizer span of the timeline.
  void optimizer_phase(int64_t step, const std::function<void(OpContext&)>& fn);

  // Every device DataParallel uses (device_ids, and output_device if not among them).
  const std::vector<int>& devices() const { return dp_->timeline().devices(); }
  double modelled_time() const;  // the latest clock of those devices
  DpReport report(int64_t steps) const;
  // The UserWarnings DataParallel raised so far (its constructor's imbalance check).
  const std::vector<std::string>& warnings() const { return warnings_; }
  // The balance check's finding, if it warned.
  const std::optional<parallel::Imbalance>& imbalance() const { return dp_->imbalance(); }

 private:
  Runtime& rt_;
  int64_t batch_;
  double start_s_ = 0;
  std::vector<std::string> warnings_;
  std::vector<std::string> warning_notes_;  // Furnace's line under each
  std::optional<parallel::NamedGpu> warned_gpu_;
  std::unique_ptr<DataParallel> dp_;
};

}  // namespace furnace
