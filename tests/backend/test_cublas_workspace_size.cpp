// cuBLAS's workspace size by PyTorch's rule (aten/src/ATen/cuda/CublasHandlePool.cpp,
// parseChosenWorkspaceSize, read at pytorch/pytorch@26a3905): the cuda backend's host code, on the CPU.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "backend/cuda/ops/cublas_workspace_size.h"
#include "furnace/error.h"

namespace furnace::cuda {
namespace {

size_t bytes(int major, int minor, const std::optional<std::string>& config) {
  return cublas_workspace_size(major, minor, config).bytes;
}

TEST(CublasWorkspaceSize, DefaultIs32MiBOnHopperElse4096x2Plus16x8KiB) {
  EXPECT_EQ(bytes(9, 0, std::nullopt), 33554432u);  // H100, H200
  EXPECT_EQ(bytes(8, 0, std::nullopt), 8519680u);   // A100
  EXPECT_EQ(bytes(8, 6, std::nullopt), 8519680u);   // RTX 3090
  EXPECT_EQ(bytes(8, 9, std::nullopt), 8519680u);   // RTX 4060 Laptop
  EXPECT_EQ(bytes(10, 0, std::nullopt), 8519680u);  // PyTorch tests major == 9 && minor == 0 only
}

TEST(CublasWorkspaceSize, EveryPairOfTheConfigAddsSizeKiBTimesCount) {
  EXPECT_EQ(bytes(8, 6, ":4096:8"), 33554432u);  // cuBLAS's documented deterministic settings
  EXPECT_EQ(bytes(9, 0, ":16:8"), 131072u);
  EXPECT_EQ(bytes(9, 0, ":4096:2:16:8"), 8519680u);
  EXPECT_EQ(bytes(9, 0, ":0:0"), 0u);  // no workspace at all
  EXPECT_TRUE(cublas_workspace_size(9, 0, ":16:8").warning.empty());
}

TEST(CublasWorkspaceSize, ASettingWithoutAPairWarnsAndTakesTheDefault) {
  for (const char* config : {"", "4096:8", "big", ":x:8"}) {
    const CublasWorkspaceSize s = cublas_workspace_size(8, 0, std::string(config));
    EXPECT_EQ(s.bytes, 8519680u) << config;
    EXPECT_EQ(s.warning,
              "Could not parse CUBLAS_WORKSPACE_CONFIG, using default workspace size of 8519680 bytes.")
        << config;
  }
}

TEST(CublasWorkspaceSize, ASizeBeyond64BitsIsAnErrorNamingTheSetting) {
  for (const char* config : {":99999999999999999999:1", ":18014398509481984:1", ":4096:4503599627370496"}) {
    try {
      bytes(9, 0, std::string(config));
      FAIL() << config << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("CUBLAS_WORKSPACE_CONFIG=\"" + std::string(config) + "\""),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace furnace::cuda
