// The CUDA backend. Every test here needs a GPU: without one each reports SKIPPED, never passed.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "cuda/cuda_test_support.h"  // defines: FURNACE_REQUIRE_CUDA_DEVICES
#include "furnace/error.h"
#include "furnace/ops.h"
#include "furnace/runtime.h"

namespace furnace {
namespace {

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { FURNACE_REQUIRE_CUDA_DEVICES(1); }
};

TEST_F(CudaBackendTest, EnumeratesDevicesWithSaneProperties) {
  auto backend = cuda::make_backend(nullptr);
  ASSERT_GT(backend->device_count(), 0);
  EXPECT_EQ(backend->device_count(), cuda::device_count());  // issue 14: the backend once saw 0
  const GpuSpec& g = backend->device_spec(0);
  EXPECT_FALSE(g.name.empty());
  EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u);
  EXPECT_GT(g.memory_bytes, 1ull << 30);
  EXPECT_GT(g.sm_count, 0);
}

TEST_F(CudaBackendTest, CachingAllocatorOverCudaMallocAndCopiesRoundTrip) {
  TraceBus bus;
  Runtime rt(cuda::make_backend(&bus), bus);
  OpContext ctx{rt, 0, 0};
  std::vector<float> src(4096), dst(4096, 0.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) - 7.5f;
  {
    Tensor t = Tensor::empty(rt, Device::cuda(0), {4096});
    EXPECT_EQ(rt.memory_allocated(0), 16384u);
    EXPECT_EQ(rt.memory_reserved(0), 2u << 20);
    ops::copy_to_device(ctx, t, src.data());
    ops::copy_to_host(ctx, dst.data(), t);
  }
  EXPECT_EQ(src, dst);
  EXPECT_EQ(rt.memory_allocated(0), 0u);
  size_t free_bytes = 0, total = 0;
  rt.backend().raw_allocator(0).mem_get_info(&free_bytes, &total);
  EXPECT_GT(total, free_bytes);
}

TEST_F(CudaBackendTest, OutOfMemoryIsPyTorchsErrorAndRecoverable) {
  TraceBus bus;
  Runtime rt(cuda::make_backend(&bus), bus);
  const size_t total = rt.backend().device_spec(0).memory_bytes;
  EXPECT_THROW(rt.allocator(0).allocate(total * 2), OutOfMemoryError);
  void* p = rt.allocator(0).allocate(1 << 20);
  EXPECT_NE(p, nullptr);
  rt.allocator(0).deallocate(p);
}

TEST(CudaBackendNoDevice, RegistryReportsNoDeviceAsZero) {
  // Runs everywhere: with no driver (or no device) the count must be 0, never an exception; with
  // one, what the runtime reported.
  const cuda::DriverStatus s = cuda::runtime_status();
  if (s.kind != cuda::DriverStatus::Kind::ok)
    EXPECT_EQ(cuda::device_count(), 0);
  else
    EXPECT_EQ(cuda::device_count(), s.device_count);
}

}  // namespace
}  // namespace furnace
