// ops/cuda/cuda_ops: the cuda backend's op table (backend/device_ops.h) over the launchers of this
// folder: gemm (cuBLAS), elementwise, loss, optimizer, amp, reductions (CUB). The one place that
// maps each op to its kernels, the device it runs on and its trace span.
#pragma once

#include <memory>

#include "backend/cuda/cuda_device.h"  // defines: DeviceResources
#include "backend/device_ops.h"        // defines: DeviceOps

namespace furnace::cuda {

std::unique_ptr<DeviceOps> make_cuda_ops(DeviceResources& resources);

}  // namespace furnace::cuda
