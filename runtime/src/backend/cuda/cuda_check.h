// backend/cuda: check macros. Every CUDA runtime and cuBLAS call goes through one of these; a
// failure throws furnace::Error naming the device, the statement and file:line.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "furnace/error.h"

namespace furnace::cuda {

inline int current_device_or_minus_one() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) d = -1;
  return d;
}

}  // namespace furnace::cuda

#define FURNACE_CUDA_CHECK(expr)                                                         \
  do {                                                                                   \
    cudaError_t furnace_err_ = (expr);                                                   \
    if (furnace_err_ != cudaSuccess) {                                                   \
      int furnace_dev_ = ::furnace::cuda::current_device_or_minus_one();                 \
      throw ::furnace::Error(std::string("CUDA error: ") + cudaGetErrorString(furnace_err_) + \
                                 " (device " + std::to_string(furnace_dev_) + ", " #expr ")", \
                             #expr, __FILE__, __LINE__, furnace_dev_);                   \
    }                                                                                    \
  } while (0)

#define FURNACE_CUBLAS_CHECK(expr)                                                       \
  do {                                                                                   \
    cublasStatus_t furnace_st_ = (expr);                                                 \
    if (furnace_st_ != CUBLAS_STATUS_SUCCESS) {                                          \
      int furnace_dev_ = ::furnace::cuda::current_device_or_minus_one();                 \
      throw ::furnace::Error(std::string("cuBLAS error: ") + cublasGetStatusString(furnace_st_) + \
                                 " (device " + std::to_string(furnace_dev_) + ", " #expr ")", \
                             #expr, __FILE__, __LINE__, furnace_dev_);                   \
    }                                                                                    \
  } while (0)
