// Tensor, Runtime and the sim backend: device tensors come from the caching allocator, copies
// and kernels advance the modelled clock.
#include <gtest/gtest.h>

#include "backend/sim/sim_backend.h"
#include "furnace/error.h"
#include "furnace/ops.h"
#include "furnace/runtime.h"
#include "furnace/tensor.h"
#include "furnace/topology.h"

namespace furnace {
namespace {

struct SimFixture : ::testing::Test {
  TraceBus bus;
  Topology topo = load_topology("laptop-4060");
  Runtime rt{make_sim_backend(topo, &bus), bus};
};

TEST(Shape, NumelAndString) {
  EXPECT_EQ(shape_numel({256, 784}), 256 * 784);
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_str({2, 3}), "(2, 3)");
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  EXPECT_EQ(Device::cpu().str(), "cpu");
}

TEST_F(SimFixture, DeviceTensorIsAccountedAndFreed) {
  EXPECT_EQ(rt.memory_allocated(0), 0u);
  {
    Tensor t = Tensor::empty(rt, Device::cuda(0), {256, 784});
    EXPECT_EQ(t.nbytes(), 256u * 784 * 4);
    EXPECT_EQ(rt.memory_allocated(0), 802816u);  // a multiple of 512 already
    EXPECT_EQ(rt.memory_reserved(0), 2u << 20);  // <= 1 MiB: the small pool's 2 MiB segment
    Tensor big = Tensor::empty(rt, Device::cuda(0), {512, 784});  // 1.5 MiB: a 20 MiB segment
    EXPECT_EQ(rt.memory_reserved(0), 22u << 20);
    Tensor alias = t.reshape({784, 256});
    EXPECT_EQ(alias.raw(), t.raw());
  }
  EXPECT_EQ(rt.memory_allocated(0), 0u);
  EXPECT_EQ(rt.memory_reserved(0), 22u << 20);  // cached, not returned
  rt.empty_cache(0);
  EXPECT_EQ(rt.memory_reserved(0), 0u);
}

TEST_F(SimFixture, ReshapeChecksElementCount) {
  Tensor t = Tensor::empty_host({2, 3});
  EXPECT_THROW(t.reshape({4, 2}), Error);
}

TEST_F(SimFixture, InvalidDeviceOrdinal) {
  EXPECT_THROW(Tensor::empty(rt, Device::cuda(1), {4}), Error);
}

TEST_F(SimFixture, CopiesRoundTripAndAdvanceTheClock) {
  OpContext ctx{rt, 0, 0};
  std::vector<float> src(1000), dst(1000, 0.0f);
  for (int i = 0; i < 1000; ++i) src[static_cast<size_t>(i)] = static_cast<float>(i) * 0.5f;
  Tensor t = Tensor::empty(rt, Device::cuda(0), {1000});
  const double before = rt.backend().device_time(0);
  ops::copy_to_device(ctx, t, src.data());
  const double after = rt.backend().device_time(0);
  ops::copy_to_host(ctx, dst.data(), t);
  EXPECT_EQ(src, dst);
  const double expected = model_copy_seconds(4000.0, topo.host.pageable_bandwidth, topo.host.latency_s);
  EXPECT_NEAR(after - before, expected, 1e-12);
}

TEST(TimingModel, KernelIsTheRooflinePlusLaunch) {
  GpuSpec g;
  g.peak_flops_f32 = 1e12;
  g.peak_flops_f16 = 8e12;
  g.peak_flops_bf16 = 8e12;
  g.memory_bandwidth = 1e11;
  g.launch_latency_s = 5e-6;
  // compute-bound: 1e9 flops / 1e12 = 1 ms, 1e6 bytes / 1e11 = 10 us
  EXPECT_NEAR(model_kernel_seconds(g, {1e9, 1e6, DType::f32}), 1e-3 + 5e-6, 1e-12);
  // memory-bound
  EXPECT_NEAR(model_kernel_seconds(g, {1e3, 1e9, DType::f32}), 1e-2 + 5e-6, 1e-12);
  // tensor cores for half types
  EXPECT_NEAR(model_kernel_seconds(g, {8e9, 0, DType::f16}), 1e-3 + 5e-6, 1e-12);
}

TEST_F(SimFixture, SimDeviceCapacityIsMemoryLessContext) {
  size_t free_bytes = 0, total = 0;
  rt.backend().raw_allocator(0).mem_get_info(&free_bytes, &total);
  const GpuSpec& g = topo.gpus[0];
  EXPECT_EQ(total, g.memory_bytes);
  EXPECT_EQ(free_bytes, g.memory_bytes - g.context_bytes);
}

}  // namespace
}  // namespace furnace
