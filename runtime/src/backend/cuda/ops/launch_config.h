// backend/cuda/ops/launch_config: grid sizes for the CUDA kernels, in plain C++ so the CPU tests check
// them. Kernels loop grid-stride, so a grid may be smaller than the work.
#pragma once

#include <algorithm>
#include <cstdint>

namespace furnace::cuda {

struct Launch1D {
  unsigned grid = 0;   // 0: nothing to do, the launcher must not launch
  unsigned block = 0;
};

// n elements, `block` threads a block: ceil(n / block) blocks, capped at max_blocks (>= 1).
inline Launch1D launch_1d(int64_t n, int block, int64_t max_blocks) {
  if (n <= 0 || block <= 0) return {};
  const int64_t blocks = (n + block - 1) / block;
  return {static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, std::max<int64_t>(max_blocks, 1))),
          static_cast<unsigned>(block)};
}

// Enough blocks to fill a device: a few resident blocks per SM, the grid-stride loop does the rest.
inline int64_t max_blocks_for(int sm_count) { return static_cast<int64_t>(std::max(sm_count, 1)) * 16; }

// One block per `rows_per_block` rows (row kernels: softmax, accuracy), capped like launch_1d.
inline unsigned row_blocks(int64_t rows, int rows_per_block) {
  if (rows <= 0 || rows_per_block <= 0) return 0;
  return static_cast<unsigned>(
      std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, int64_t{1} << 30));
}

}  // namespace furnace::cuda
