// train/training_data: the splits a training run reads, loaded and normalised once (the pixels'
// table: furnace/data.h). The ranks of a DDP run share one copy (processes of torchrun would each
// read the files; on the simulator the samples are the same bytes, and eight copies of
// Fashion-MNIST's bytes would be 440 MB of host memory).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "furnace/data.h"   // defines: ImageDataset
#include "furnace/train.h"  // defines: Scenario

namespace furnace {

struct TrainingData {
  std::string dir;            // where the files were read
  ImageDataset train, test;   // test is empty unless the scenario evaluates
  uint32_t crc = 0;           // CRC32 of the training split as read (its fingerprint in a checkpoint)
};

// Reads sc's data (Debian's Fashion-MNIST unless sc.data_dir), fingerprints the training split
// when `with_crc` (checkpoints), and normalises both splits with the training split's statistics
// when sc.normalize. Throws one line for missing files or a batch larger than the training set.
std::shared_ptr<const TrainingData> load_training_data(const Scenario& sc, bool with_crc);

// The MLP's layer widths for `sc` on `data`: the image's pixels, sc.hidden, the 10 classes.
std::vector<int> mlp_layer_sizes(const Scenario& sc, const TrainingData& data);

}  // namespace furnace
