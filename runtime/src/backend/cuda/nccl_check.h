// backend/cuda: NCCL's check macro, the same shape as FURNACE_CUDA_CHECK (cuda_check.h). Only built
// when CMake found NCCL (FURNACE_WITH_NCCL).
#pragma once

#include <nccl.h>

#include "backend/cuda/cuda_check.h"

#define FURNACE_NCCL_CHECK(expr)                                                             \
  do {                                                                                       \
    const ncclResult_t furnace_nr_ = (expr);                                                 \
    if (furnace_nr_ != ncclSuccess)                                                          \
      ::furnace::cuda::throw_error("NCCL", ncclGetErrorString(furnace_nr_), #expr, __FILE__, \
                                   __LINE__);                                                \
  } while (0)
