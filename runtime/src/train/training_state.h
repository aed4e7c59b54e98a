// train/training_state: the model's and the optimizer's part of a checkpoint, between the live
// objects on the (simulated) devices and host copies: model.state_dict() named as PyTorch names it
// (with DataParallel's "module." prefix when the run wraps the model), the optimizer state by
// parameter index, and the way back, with PyTorch's key and shape checks.
// Not here: the loader's position and the loop's tallies (training_run.cpp), the file (checkpoint_file.cpp).
#pragma once

#include <string>
#include <vector>

#include "furnace/checkpoint.h"  // defines: Checkpoint, StateTensor
#include "furnace/nn.h"          // defines: MLP, Optimizer

namespace furnace {

// model.state_dict(): keys "0.weight", ... or, when `data_parallel`, "module.0.weight", ...
std::vector<StateTensor> capture_model(Runtime& rt, MLP& model, bool data_parallel);
// optimizer.state_dict()["state"]: "state.<i>.<key>" for each stepped parameter (AdamW's step as
// a 0-dim tensor).
std::vector<StateTensor> capture_optimizer_state(Runtime& rt, const Optimizer& optimizer);

// Loads the checkpoint's model and optimizer state into `model` and `optimizer` (built for the
// current scenario; `wrapper` is "" for the bare model, or "DataParallel" /
// "DistributedDataParallel", whose state_dict keys carry "module."). Keys follow PyTorch's
// load_state_dict: with `strict_keys` any missing or unexpected key is PyTorch's error; otherwise
// a "module." prefix on one side only is fixed and explained (lines appended to `notes`). A key
// set or shape that does not fit is one line: "checkpoint <path> does not fit this model (...)".
void load_model_and_optimizer(Runtime& rt, MLP& model, Optimizer& optimizer, const Checkpoint& ck,
                              const std::string& wrapper, bool strict_keys, const std::string& path,
                              std::vector<std::string>& notes);

}  // namespace furnace
