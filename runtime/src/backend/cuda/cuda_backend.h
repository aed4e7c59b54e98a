// backend/cuda: the NVIDIA GPU backend. This header has no CUDA types; only the .cu files include
// the CUDA runtime. Devices as the runtime enumerates them, raw memory (cudaMalloc,
// cudaMemGetInfo), one compute stream and one copy stream per device, copies (pinned host-to-device
// copies asynchronous on the copy stream, peer copies with ATen's two-way stream barrier), the op
// table (ops/cuda), NCCL collectives where NCCL was found, and trace spans timed with CUDA events.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/driver_status.h"  // defines: DriverStatus, explain
#include "furnace/backend.h"

namespace furnace::cuda {

// Number of CUDA devices; 0 when the driver is missing or too old (any error counts as none).
int device_count();
// cudaGetDeviceCount's answer with the driver's and the runtime's CUDA versions: why there is no
// device (explain(runtime_status()) is the one line to print).
DriverStatus runtime_status();
// `physical[d]`: nvidia-smi's number of cuda:d (from NVML, matched by UUID); empty: unknown.
std::unique_ptr<Backend> make_backend(TraceBus* trace, std::vector<int> physical = {});
// The devices as the CUDA runtime enumerates them (after CUDA_VISIBLE_DEVICES): name, UUID, PCI
// bus id, memory, SMs. Empty when there is none. `error` says why, when the runtime failed.
std::vector<GpuSpec> logical_devices(std::string* error = nullptr);

}  // namespace furnace::cuda
