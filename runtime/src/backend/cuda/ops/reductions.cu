// backend/cuda/ops/reductions: cub::DeviceReduce::Sum in its two calls (size the temporary storage, then
// reduce), both on the caller's stream.
#include "backend/cuda/ops/reductions.cuh"

#include <cub/device/device_reduce.cuh>

#include "backend/cuda/cuda_check.h"

namespace furnace::cuda {
namespace {

template <class T>
void sum_impl(cudaStream_t stream, const T* in, T* out, int64_t n, Workspace& ws) {
  if (n <= 0) {  // CUB writes the identity for an empty range too, but skip the launches
    FURNACE_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(T), stream));
    return;
  }
  size_t temp_bytes = 0;
  FURNACE_CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, temp_bytes, in, out, n, stream));
  void* temp = ws.get(temp_bytes > 0 ? temp_bytes : 1);
  FURNACE_CUDA_CHECK(cub::DeviceReduce::Sum(temp, temp_bytes, in, out, n, stream));
}

}  // namespace

void device_sum(cudaStream_t stream, const float* in, float* out, int64_t n, Workspace& ws) {
  sum_impl(stream, in, out, n, ws);
}

void device_sum(cudaStream_t stream, const int32_t* in, int32_t* out, int64_t n, Workspace& ws) {
  sum_impl(stream, in, out, n, ws);
}

}  // namespace furnace::cuda
