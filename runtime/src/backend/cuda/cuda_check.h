// backend/cuda: check macros and the device guard. Every CUDA runtime and cuBLAS call goes through
// one of these macros; a failure throws furnace::Error naming the device, the statement and
// file:line ("CUDA error: out of memory (device 1, cudaMemcpyAsync(...))"). NCCL's macro is in
// nccl_check.h (only built with NCCL).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "furnace/error.h"

namespace furnace::cuda {

inline int current_device_or_minus_one() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) d = -1;
  return d;
}

// The one place a failed status becomes an exception: "<library> error: <text> (device d,
// <statement>)".
[[noreturn]] inline void throw_error(const char* library, const char* text, const char* statement,
                                     const char* file, int line) {
  const int device = current_device_or_minus_one();
  throw ::furnace::Error(std::string(library) + " error: " + text + " (device " +
                             std::to_string(device) + ", " + statement + ")",
                         statement, file, line, device);
}

}  // namespace furnace::cuda

#define FURNACE_CUDA_CHECK(expr)                                                              \
  do {                                                                                        \
    const cudaError_t furnace_err_ = (expr);                                                  \
    if (furnace_err_ != cudaSuccess)                                                          \
      ::furnace::cuda::throw_error("CUDA", cudaGetErrorString(furnace_err_), #expr, __FILE__, \
                                   __LINE__);                                                 \
  } while (0)

#define FURNACE_CUBLAS_CHECK(expr)                                                               \
  do {                                                                                           \
    const cublasStatus_t furnace_st_ = (expr);                                                   \
    if (furnace_st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::furnace::cuda::throw_error("cuBLAS", cublasGetStatusString(furnace_st_), #expr, __FILE__, \
                                   __LINE__);                                                    \
  } while (0)

namespace furnace::cuda {

// cudaEventQuery / cudaStreamQuery: true when done, false when not yet (cudaErrorNotReady, which
// the runtime also records as this thread's last error: cleared here, or the next launch check,
// cudaGetLastError or CUB's cudaPeekAtLastError, would report "device not ready"); throws
// otherwise.
inline bool query_done(cudaError_t q, const char* statement, const char* file, int line) {
  if (q == cudaSuccess) return true;
  if (q == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  throw_error("CUDA", cudaGetErrorString(q), statement, file, line);
}
#define FURNACE_CUDA_QUERY(expr) ::furnace::cuda::query_done((expr), #expr, __FILE__, __LINE__)

// Makes `device` current for the lifetime of the guard, as c10::cuda::CUDAGuard. The current
// device is per host thread, so DataParallel's workers each keep their own.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FURNACE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) FURNACE_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace furnace::cuda
