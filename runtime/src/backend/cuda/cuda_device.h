// backend/cuda/cuda_device: what the CUDA ops need from the cuda backend for one device: its
// compute stream, its cuBLAS handle and the event trace. The backend owns them and creates a
// device's at its first use (so a process touches only the GPUs it uses, as PyTorch's lazy init).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <mutex>

#include "backend/cuda/event_trace.h"

namespace furnace::cuda {

class DeviceResources {
 public:
  virtual ~DeviceResources() = default;
  // The device's compute stream. Every logical stream of a device maps to it: the caching
  // allocator hands out memory per logical stream 0, and one CUDA stream keeps every reuse of a
  // freed block in order behind the work that used it. Call with `device` current.
  virtual cudaStream_t stream(int device) = 0;
  // The device's cuBLAS handle; hold cublas_mutex(device) while setting its stream and calling it
  // (DataParallel's workers and the main thread may share a device's handle one after another).
  virtual cublasHandle_t cublas(int device) = 0;
  virtual std::mutex& cublas_mutex(int device) = 0;
  virtual int sm_count(int device) const = 0;
  virtual EventTrace& events() = 0;
};

}  // namespace furnace::cuda
