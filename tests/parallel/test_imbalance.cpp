// What the imbalance warning's "GPU N" numbers are on a machine (furnace/imbalance.h): cuda
// ordinals, which the line under the warning names with the card and nvidia-smi's number, and
// the device_ids / CUDA_VISIBLE_DEVICES values that leave the small GPU out.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "furnace/imbalance.h"
#include "furnace/topology.h"
#include "furnace/visibility.h"

namespace furnace::parallel {
namespace {

// The RTX 3060 is nvidia-smi's GPU 0 (PCI bus order), the RTX 3090 GPU 1.
const Topology& mixed() {
  static const Topology t = load_topology("mixed-3090-3060");
  return t;
}

std::string explained(const std::optional<std::string>& visible, DeviceOrder order, const Imbalance& im,
                      bool zh = false) {
  return explain_imbalance(im, mixed(), resolve_visibility(mixed().gpus, visible, order), zh);
}

TEST(Imbalance, TheWarningIsPyTorchsText) {
  EXPECT_EQ(imbalance_warning({{0, 1}, 1, 0}),
            "\n    There is an imbalance between your GPUs. You may want to exclude GPU 1 which\n"
            "    has less than 75% of the memory or cores of GPU 0. You can do so by setting\n"
            "    the device_ids argument to DataParallel, or by setting the CUDA_VISIBLE_DEVICES\n"
            "    environment variable.");
}

TEST(Imbalance, FastestFirstTheWarningsGpu1IsNvidiaSmisGpu0) {
  // Nothing set: CUDA puts the RTX 3090 first, so the small card is cuda:1, and the variable
  // keeps the 3090 with 0, CUDA's number for it, not nvidia-smi's 1.
  EXPECT_EQ(explained(std::nullopt, DeviceOrder::fastest_first, {{0, 1}, 1, 0}),
            "The warning's GPU 1 and GPU 0 are device_ids entries, i.e. cuda:N: GPU 1 is cuda:1, "
            "NVIDIA GeForce RTX 3060 (nvidia-smi's GPU 0); GPU 0 is cuda:0, NVIDIA GeForce RTX 3090 "
            "(nvidia-smi's GPU 1). To leave cuda:1 out: device_ids=[0], or CUDA_VISIBLE_DEVICES=0 "
            "(CUDA's numbering: fastest first, not nvidia-smi's)");
  EXPECT_EQ(explained(std::nullopt, DeviceOrder::fastest_first, {{0, 1}, 1, 0}, true),
            "警告里的 GPU 1 和 GPU 0 是 device_ids 里的编号，即 cuda:N：GPU 1 是 cuda:1，"
            "NVIDIA GeForce RTX 3060（nvidia-smi 的 GPU 0）；GPU 0 是 cuda:0，NVIDIA GeForce RTX 3090"
            "（nvidia-smi 的 GPU 1）。要去掉 cuda:1：device_ids=[0]，或 CUDA_VISIBLE_DEVICES=0"
            "（按 CUDA 的编号：最快的在前，不是 nvidia-smi 的编号）");
}

TEST(Imbalance, PciBusOrderAgreesWithNvidiaSmi) {
  EXPECT_EQ(explained(std::nullopt, DeviceOrder::pci_bus_id, {{0, 1}, 0, 1}),
            "The warning's GPU 0 and GPU 1 are device_ids entries, i.e. cuda:N: GPU 0 is cuda:0, "
            "NVIDIA GeForce RTX 3060 (nvidia-smi's GPU 0); GPU 1 is cuda:1, NVIDIA GeForce RTX 3090 "
            "(nvidia-smi's GPU 1). To leave cuda:0 out: device_ids=[1], or CUDA_VISIBLE_DEVICES=1");
}

TEST(Imbalance, ASetVariableKeepsItsOwnEntries) {
  // CUDA_VISIBLE_DEVICES=1,0 (fastest first: entry 1 is the 3060, entry 0 the 3090): cuda:0 is
  // the 3060; leaving it out keeps the entry "0".
  std::string line = explained("1,0", DeviceOrder::fastest_first, {{0, 1}, 0, 1});
  EXPECT_NE(line.find("GPU 0 is cuda:0, NVIDIA GeForce RTX 3060 (nvidia-smi's GPU 0)"), std::string::npos) << line;
  EXPECT_NE(line.find("To leave cuda:0 out: device_ids=[1], or CUDA_VISIBLE_DEVICES=0"), std::string::npos) << line;
  EXPECT_EQ(line.find("fastest first"), std::string::npos) << line;  // the user's own entries
  // Entries by UUID are kept as written.
  const std::string uuid_3090 = mixed().gpus[1].uuid, uuid_3060 = mixed().gpus[0].uuid;
  line = explained(uuid_3060 + "," + uuid_3090, DeviceOrder::fastest_first, {{0, 1}, 0, 1});
  EXPECT_NE(line.find("CUDA_VISIBLE_DEVICES=" + uuid_3090), std::string::npos) << line;
}

TEST(Imbalance, DeviceIdsKeepTheirOrderWithoutTheSmallOne) {
  const std::string line = explained(std::nullopt, DeviceOrder::fastest_first, {{1, 0}, 1, 0});
  EXPECT_NE(line.find("device_ids=[0]"), std::string::npos) << line;
  // A map that does not know the GPU (an ordinal beyond it) still names the ordinal.
  const std::string unknown = explained("0", DeviceOrder::fastest_first, {{0, 1}, 1, 0});
  EXPECT_NE(unknown.find("GPU 1 is cuda:1;"), std::string::npos) << unknown;
}

}  // namespace
}  // namespace furnace::parallel
