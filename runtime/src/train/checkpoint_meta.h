// train/checkpoint_meta: the "meta" section of a checkpoint, JSON: the Scenario, the step counters,
// the optimizer's hyper-parameters, the GradScaler's state_dict, the loader's position and the
// run's tallies. Not here: the container and the tensors (checkpoint_file.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "furnace/checkpoint.h"  // defines: Checkpoint

namespace furnace {

std::string checkpoint_meta_json(const Checkpoint& ck);
// Fills every field of `ck` but the tensors; checks types, ranges and the scenario (validate()),
// and that the optimizer state names parameters of `ck.model`. Throws one furnace::Error line
// "checkpoint <origin>: ...".
void parse_checkpoint_meta(const std::string& text, Checkpoint& ck, const std::string& origin);

// An optimizer state name "state.<i>.<key>" split into (i, key); i is -1 when the name has
// another form.
std::pair<int64_t, std::string> optimizer_state_name(const std::string& name);
// The state keys torch.optim's `type` ("SGD", "AdamW") keeps per parameter; empty for another type.
std::vector<std::string> optimizer_state_keys(const std::string& type);

// "(512, 784)"
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace furnace
