// backend/cuda: the NVIDIA GPU backend. This header has no CUDA types; only cuda_backend.cu
// includes the CUDA runtime. For now it holds device enumeration and raw memory (cudaMalloc,
// cudaMemcpy, cudaMemGetInfo); the ops arrive with the CUDA backend issue.
#pragma once

#include <memory>

#include "furnace/backend.h"

namespace furnace::cuda {

// Number of CUDA devices; 0 when the driver is missing or too old (any error counts as none).
int device_count();
std::unique_ptr<Backend> make_backend(TraceBus* trace);

}  // namespace furnace::cuda
