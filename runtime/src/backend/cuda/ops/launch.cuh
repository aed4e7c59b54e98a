// backend/cuda/ops/launch: the grid-stride index loop and the launch helper every elementwise launcher
// uses: it picks the grid (launch_config.h), launches nothing for n == 0, and checks the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/launch_config.h"

namespace furnace::cuda {

constexpr int kElementwiseBlock = 256;

// for (int64_t i : GridStride(n)): this thread's indices of [0, n).
struct GridStride {
  int64_t n;
  struct Iterator {
    int64_t i, step;
    __device__ int64_t operator*() const { return i; }
    __device__ Iterator& operator++() {
      i += step;
      return *this;
    }
    __device__ bool operator!=(const Iterator& end) const { return i < end.i; }
  };
  __device__ Iterator begin() const {
    return {static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
            static_cast<int64_t>(gridDim.x) * blockDim.x};
  }
  __device__ Iterator end() const { return {n, 0}; }
};

template <class Kernel, class... Args>
void launch_elementwise(cudaStream_t stream, int64_t n, int64_t max_blocks, Kernel kernel,
                        Args... args) {
  const Launch1D l = launch_1d(n, kElementwiseBlock, max_blocks);
  if (l.grid == 0) return;
  kernel<<<l.grid, l.block, 0, stream>>>(args...);
  FURNACE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace furnace::cuda
