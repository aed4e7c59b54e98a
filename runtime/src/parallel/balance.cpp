// parallel/balance: DataParallel's _check_balance (torch/nn/parallel/data_parallel.py) and what
// its warning's numbers mean on this machine (furnace/imbalance.h).
#include <algorithm>
#include <string>
#include <vector>

#include "furnace/error.h"      // defines: FURNACE_CHECK
#include "furnace/imbalance.h"  // defines: Imbalance
#include "furnace/parallel.h"   // defines: find_imbalance
#include "furnace/runtime.h"    // defines: Runtime

namespace furnace::parallel {

// get_device_properties raises "Invalid device id" for an id outside the visible devices; then
// total_memory, and only if that is balanced multi_processor_count, are compared: min / max < 0.75
// warns (first minimum, first maximum).
std::optional<Imbalance> find_imbalance(Runtime& rt, const std::vector<int>& ids) {
  std::vector<const GpuSpec*> props;
  for (int id : ids) {
    FURNACE_CHECK(id >= 0 && id < rt.device_count()) << "Invalid device id";
    // Two replicas on one device would sum that device's gradients twice in reduce-add.
    FURNACE_CHECK(std::count(ids.begin(), ids.end(), id) == 1)
        << "device_ids names device " << id << " more than once: DataParallel runs one replica per device, "
        << "so each id may appear only once";
    props.push_back(&rt.backend().device_spec(id));
  }
  auto imbalanced = [&](auto value) -> std::optional<Imbalance> {
    size_t lo = 0, hi = 0;
    for (size_t i = 1; i < props.size(); ++i) {
      if (value(*props[i]) < value(*props[lo])) lo = i;
      if (value(*props[i]) > value(*props[hi])) hi = i;
    }
    if (props.empty() || !(value(*props[lo]) / value(*props[hi]) < 0.75)) return std::nullopt;
    return Imbalance{ids, ids[lo], ids[hi]};
  };
  if (auto by_memory = imbalanced([](const GpuSpec& g) { return static_cast<double>(g.memory_bytes); }))
    return by_memory;
  return imbalanced([](const GpuSpec& g) { return static_cast<double>(g.sm_count); });
}

NamedGpu named_gpu(int ordinal, const Topology& topology, const Visibility& visibility) {
  NamedGpu g{ordinal, "", -1};
  if (ordinal < 0 || ordinal >= visibility.count()) return g;
  const int physical = visibility.devices[static_cast<size_t>(ordinal)].physical_index;
  if (physical < 0 || physical >= static_cast<int>(topology.gpus.size())) return g;
  g.name = topology.gpus[static_cast<size_t>(physical)].name;
  g.smi = physical;
  return g;
}

std::string imbalance_warning(const Imbalance& im) {
  return "\n    There is an imbalance between your GPUs. You may want to exclude GPU " + std::to_string(im.min_id) +
         " which\n    has less than 75% of the memory or cores of GPU " + std::to_string(im.max_id) +
         ". You can do so by setting\n    the device_ids argument to DataParallel, or by setting the "
         "CUDA_VISIBLE_DEVICES\n    environment variable.";
}

namespace {

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

// "GPU 1 is cuda:1, NVIDIA GeForce RTX 3060 (nvidia-smi's GPU 0)"; the name and nvidia-smi's
// number where the process's map knows them.
std::string which(int id, const Topology& topology, const Visibility& visibility, bool zh) {
  const std::string out = "GPU " + std::to_string(id) + (zh ? " 是 " : " is ") + "cuda:" + std::to_string(id);
  const NamedGpu g = named_gpu(id, topology, visibility);
  if (g.smi < 0) return out;
  const std::string smi = "GPU " + std::to_string(g.smi);
  return out + (zh ? "，" + g.name + "（nvidia-smi 的 " + smi + "）" : ", " + g.name + " (nvidia-smi's " + smi + ")");
}

// The CUDA_VISIBLE_DEVICES value that keeps every visible GPU but cuda:`left_out`, in the
// variable's own numbering: the entries it was given, or (unset) CUDA's enumeration index, which
// is then the ordinal. Empty where no GPU would be left or an entry is not known.
std::string visible_without(int left_out, const Visibility& visibility) {
  std::vector<std::string> kept;
  for (const VisibleDevice& d : visibility.devices) {
    if (d.ordinal == left_out) continue;
    if (visibility.cuda_visible_devices && d.entry.empty()) return "";
    kept.push_back(visibility.cuda_visible_devices ? d.entry : std::to_string(d.ordinal));
  }
  return joined(kept);
}

}  // namespace

std::string explain_imbalance(const Imbalance& im, const Topology& topology, const Visibility& visibility,
                              bool zh) {
  const std::string lo = "GPU " + std::to_string(im.min_id), hi = "GPU " + std::to_string(im.max_id);
  std::vector<std::string> rest;
  for (int id : im.ids)
    if (id != im.min_id) rest.push_back(std::to_string(id));
  const std::string device_ids = "device_ids=[" + joined(rest) + "]";
  const std::string visible = visible_without(im.min_id, visibility);
  // Unset, the variable counts as CUDA does: where that is not nvidia-smi's order (fastest first
  // put another GPU first; PCI_BUS_ID never does), say so.
  bool reordered = false;
  for (const VisibleDevice& d : visibility.devices) reordered = reordered || d.physical_index != d.ordinal;
  const bool counted_as_cuda = !visibility.cuda_visible_devices && reordered;
  const std::string left_out = "cuda:" + std::to_string(im.min_id);
  if (zh) {
    std::string out = "警告里的 " + lo + " 和 " + hi + " 是 device_ids 里的编号，即 cuda:N：" +
                      which(im.min_id, topology, visibility, true) + "；" + which(im.max_id, topology, visibility, true) +
                      "。要去掉 " + left_out + "：" + device_ids;
    if (!visible.empty())
      out += "，或 CUDA_VISIBLE_DEVICES=" + visible +
             (counted_as_cuda ? "（按 CUDA 的编号：最快的在前，不是 nvidia-smi 的编号）" : "");
    return out;
  }
  std::string out = "The warning's " + lo + " and " + hi + " are device_ids entries, i.e. cuda:N: " +
                    which(im.min_id, topology, visibility, false) + "; " + which(im.max_id, topology, visibility, false) +
                    ". To leave " + left_out + " out: " + device_ids;
  if (!visible.empty())
    out += ", or CUDA_VISIBLE_DEVICES=" + visible +
           (counted_as_cuda ? " (CUDA's numbering: fastest first, not nvidia-smi's)" : "");
  return out;
}

}  // namespace furnace::parallel
