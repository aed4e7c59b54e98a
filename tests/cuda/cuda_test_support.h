// What the CUDA tests share: the device requirement (SKIPPED without a device, never passed; the
// GPU check script sets FURNACE_REQUIRE_GPU=1 so a missing device fails there instead), a runtime
// over the real cuda backend, and host<->device helpers for f32/f16/bf16 values.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "furnace/ops.h"
#include "furnace/runtime.h"

namespace furnace::cuda_test {

inline bool gpu_required() {
  const char* v = std::getenv("FURNACE_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

// In a test body or SetUp: skip unless `n` devices are visible. With FURNACE_REQUIRE_GPU=1 having
// no device at all is a failure (a multi-GPU test still skips on a single-GPU machine).
// The stand-in runtime of tests/standin is not a GPU: under it every GPU test skips (and fails
// with FURNACE_REQUIRE_GPU=1).
inline bool standin_runtime_loaded() { return dlsym(RTLD_DEFAULT, "furnace_cuda_standin") != nullptr; }

#define FURNACE_REQUIRE_CUDA_DEVICES(n)                                                        \
  do {                                                                                         \
    const int furnace_have_ =                                                                  \
        ::furnace::cuda_test::standin_runtime_loaded() ? 0 : ::furnace::cuda::device_count();  \
    if (furnace_have_ == 0 && ::furnace::cuda_test::gpu_required())                            \
      FAIL() << "FURNACE_REQUIRE_GPU=1 but no CUDA device is visible";                         \
    if (furnace_have_ < (n))                                                                   \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), " << furnace_have_ << " visible";    \
  } while (0)

// One process's runtime over the real GPUs.
struct CudaMachine {
  CudaMachine() : rt(cuda::make_backend(&bus), bus) {}
  TraceBus bus;
  Runtime rt;
};

inline Tensor upload(Runtime& rt, int device, const std::vector<float>& v, Shape shape,
                     DType dt = DType::f32) {
  OpContext ctx{rt, device, 0};
  Tensor t = Tensor::empty(rt, Device::cuda(device), std::move(shape), dt);
  if (dt == DType::f32) {
    ops::copy_to_device(ctx, t, v.data());
  } else {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      bits[i] = dt == DType::f16 ? f32_to_f16_bits(v[i]) : f32_to_bf16_bits(v[i]);
    ops::copy_to_device(ctx, t, bits.data());
  }
  return t;
}

inline std::vector<uint16_t> download_bits(Runtime& rt, const Tensor& t) {
  OpContext ctx{rt, t.device().index, 0};
  std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
  ops::copy_to_host(ctx, bits.data(), t);
  return bits;
}

// Values as f32 (16-bit values converted exactly).
inline std::vector<float> download(Runtime& rt, const Tensor& t) {
  OpContext ctx{rt, t.device().index, 0};
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::f32) {
    ops::copy_to_host(ctx, out.data(), t);
    return out;
  }
  const std::vector<uint16_t> bits = download_bits(rt, t);
  for (size_t i = 0; i < bits.size(); ++i)
    out[i] = t.dtype() == DType::f16 ? f16_bits_to_f32(bits[i]) : bf16_bits_to_f32(bits[i]);
  return out;
}

}  // namespace furnace::cuda_test
