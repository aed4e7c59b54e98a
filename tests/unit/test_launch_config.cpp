// The CUDA kernels' launch arithmetic (ops/cuda/launch_config.h), on the CPU: grids cover the work
// or are capped (the kernels loop grid-stride), nothing launches for no work.
#include <gtest/gtest.h>

#include "backend/cuda/ops/launch_config.h"

namespace furnace::cuda {
namespace {

TEST(LaunchConfig, OneDimensionalGridsCoverTheWorkUpToTheCap) {
  EXPECT_EQ(launch_1d(0, 256, 100).grid, 0u);  // no launch
  EXPECT_EQ(launch_1d(-3, 256, 100).grid, 0u);
  EXPECT_EQ(launch_1d(1, 256, 100).grid, 1u);
  EXPECT_EQ(launch_1d(256, 256, 100).grid, 1u);
  EXPECT_EQ(launch_1d(257, 256, 100).grid, 2u);
  EXPECT_EQ(launch_1d(257, 256, 100).block, 256u);
  EXPECT_EQ(launch_1d(int64_t{1} << 40, 256, 100).grid, 100u);  // capped; grid-stride does the rest
  EXPECT_EQ(launch_1d(1000, 256, 0).grid, 1u);                 // a cap below 1 still launches
}

TEST(LaunchConfig, CapsScaleWithTheDevice) {
  EXPECT_EQ(max_blocks_for(132), 132 * 16);
  EXPECT_EQ(max_blocks_for(0), 16);
}

TEST(LaunchConfig, RowBlocks) {
  EXPECT_EQ(row_blocks(0, 4), 0u);
  EXPECT_EQ(row_blocks(1, 4), 1u);
  EXPECT_EQ(row_blocks(4, 4), 1u);
  EXPECT_EQ(row_blocks(5, 4), 2u);
  EXPECT_EQ(row_blocks(37, 4), 10u);
}

}  // namespace
}  // namespace furnace::cuda
