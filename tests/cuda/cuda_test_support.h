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
#include "support/test_support.h"  // defines: upload, download

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

// upload and download are the whole suite's (support/test_support.h); here only the raw 16-bit bits.
using test_support::download;
using test_support::upload;

inline std::vector<uint16_t> download_bits(Runtime& rt, const Tensor& t) {
  OpContext ctx{rt, t.device().index, 0};
  std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
  ops::copy_to_host(ctx, bits.data(), t);
  return bits;
}

}  // namespace furnace::cuda_test
