// backend/cuda/ops/cuda_ops: the cuda backend's op table (furnace/op_table.h) over the launchers of this
// folder: gemm (cuBLAS), elementwise, loss, optimizer, amp, reductions (CUB). The one place that
// maps each op to its kernels, the device it runs on and its trace span.
#pragma once

#include <memory>

#include "backend/cuda/cuda_device.h"  // defines: DeviceResources
#include "furnace/op_table.h"          // defines: OpTable

namespace furnace::cuda {

// `device_count`: the devices the backend enumerated (the table keeps a cuBLAS workspace for each).
std::unique_ptr<OpTable> make_cuda_ops(DeviceResources& resources, int device_count);

}  // namespace furnace::cuda
