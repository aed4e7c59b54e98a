// backend/cuda/ops/reductions: device-wide sums with CUB (cub::DeviceReduce), temporary storage from the
// op's Workspace. The loss, the accuracy count and the bias-free reductions go through here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "furnace/op_table.h"  // defines: Workspace

namespace furnace::cuda {

// *out (device) = in[0] + ... + in[n-1]; 0 for n == 0. Queued on `stream`.
void device_sum(cudaStream_t stream, const float* in, float* out, int64_t n, Workspace& ws);
void device_sum(cudaStream_t stream, const int32_t* in, int32_t* out, int64_t n, Workspace& ws);

}  // namespace furnace::cuda
