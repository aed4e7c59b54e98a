// machine/nvml_process: how much memory one process holds on one GPU, as NVML counts it
// (nvmlDeviceGetComputeRunningProcesses: its CUDA context, loaded kernels and every cudaMalloc),
// which is what PyTorch's out-of-memory message reports as "this process has X memory in use".
// NVML is dlopened (nvml.cpp); not available without a driver. Not here: the GPU list (nvml.h).
#pragma once

#include <cstdint>
#include <string>

namespace furnace {

// `uuid` as NVML prints it ("GPU-..."). False when NVML is missing, the GPU or the process is not
// found; `error` then says why.
bool nvml_process_memory(const std::string& uuid, unsigned pid, uint64_t* used_bytes, std::string* error = nullptr);

}  // namespace furnace
