// backend/cuda/nccl_timeout: $FURNACE_NCCL_TIMEOUT_S, the seconds an NCCL collective may take before
// its communicators are aborted and it is an error (nccl_comms.cu). Defined in backend/registry.cpp,
// which is built with or without CUDA, so a bad value is the same one-line error (checked when a
// cuda backend is made, before CUDA is touched) on a machine without a GPU.
#pragma once

namespace furnace::cuda {

// Default 300 s; a value that is not a positive number throws "FURNACE_NCCL_TIMEOUT_S='x' must be a
// positive number of seconds".
double nccl_timeout_seconds();

}  // namespace furnace::cuda
