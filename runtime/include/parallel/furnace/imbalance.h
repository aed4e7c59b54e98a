// furnace/imbalance.h: DataParallel's balance check (_check_balance) as data, and what its
// UserWarning's "GPU N" numbers mean on this machine. PyTorch prints device_ids entries, which
// are cuda ordinals; a learner reads them as nvidia-smi's numbers, and on a machine where CUDA
// puts the fastest GPU first (or CUDA_VISIBLE_DEVICES reorders) they name other cards.
// Not here: the check itself (furnace/parallel.h, DataParallel's constructor).
#pragma once

#include <string>
#include <vector>

#include "furnace/topology.h"    // defines: Topology
#include "furnace/visibility.h"  // defines: Visibility

namespace furnace::parallel {

// What _check_balance found: among `ids` (device_ids, cuda ordinals), the first device with the
// least and the first with the most total memory, or SMs where memory is balanced, when
// least / most < 0.75.
struct Imbalance {
  std::vector<int> ids;
  int min_id = 0;
  int max_id = 0;
};

// A GPU as a process sees it: cuda:`ordinal`, the card's name and nvidia-smi's number (empty and
// -1 where the process's map does not know them).
struct NamedGpu {
  int ordinal = -1;
  std::string name;
  int smi = -1;
};
NamedGpu named_gpu(int ordinal, const Topology& topology, const Visibility& visibility);

// The UserWarning's text, PyTorch's words (a leading newline, four-space indents).
std::string imbalance_warning(const Imbalance& im);

// One line under the warning, in English or Chinese: which GPU each of its numbers is (cuda:N,
// the card's name, nvidia-smi's number) in the process that saw `visibility` on `topology`, and
// how to leave the small one out (device_ids without it; the CUDA_VISIBLE_DEVICES value that
// keeps every other visible GPU, in the variable's own numbering, where that is known).
std::string explain_imbalance(const Imbalance& im, const Topology& topology, const Visibility& visibility,
                              bool zh);

}  // namespace furnace::parallel
