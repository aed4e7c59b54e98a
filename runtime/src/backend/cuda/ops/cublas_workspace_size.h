// backend/cuda/ops/cublas_workspace_size: how big cuBLAS's workspace is, by PyTorch's rule
// (aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize). Host code, tested on the CPU.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace furnace::cuda {

struct CublasWorkspaceSize {
  size_t bytes = 0;
  std::string warning;  // non-empty when the setting could not be read (PyTorch's TORCH_WARN)
};

// PyTorch's default: 32 MiB on compute capability 9.0 (Hopper), else ":4096:2:16:8" (8 MiB + 128 KiB
// = 8519680 bytes). `config` is CUBLAS_WORKSPACE_CONFIG when set: every ":SIZE:COUNT" pair in it
// adds SIZE KiB times COUNT (":4096:8" is 32 MiB, ":16:8" is 128 KiB); with no pair PyTorch warns
// and takes the default. Throws furnace::Error for a size that does not fit in 64 bits (PyTorch's
// std::stoull throws too).
CublasWorkspaceSize cublas_workspace_size(int cc_major, int cc_minor,
                                          const std::optional<std::string>& config);

}  // namespace furnace::cuda
