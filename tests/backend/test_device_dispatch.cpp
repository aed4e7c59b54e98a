// The ops layer's one road, on the CPU, with a device backend's op table: every op reaches the
// table (after its checks, which the table never sees fail), the workspace works, host tensors take
// the host's table whatever the backend, and what is built on the ops (GradScaler, DataParallel with and without
// collectives) gives the simulator's numbers when device memory may not be read by the host.
// tests/support/fake_device_backend.h has the backend; the real one is tested in tests/cuda.
// This executable carries the ctest label "threads" (DataParallel's workers call the table).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "furnace/amp.h"
#include "furnace/error.h"
#include "furnace/nn.h"
#include "furnace/parallel.h"
#include "furnace/random.h"
#include "furnace/topology.h"
#include "parallel/comm.h"
#include "support/fake_device_backend.h"
#include "support/test_support.h"  // defines: random_vec, upload, download

namespace furnace {
namespace {

using test_support::download;
using test_support::random_vec;
using test_support::upload;

using testing_support::FakeDeviceBackend;

// A runtime over the fake device backend, or over the plain simulator (fake == nullptr).
struct Machine {
  explicit Machine(bool fake_device, FakeDeviceBackend::Options options = {},
                   const std::string& topology = "workstation-4x3090") {
    const Topology topo = load_topology(topology);
    std::unique_ptr<Backend> backend;
    if (fake_device) {
      auto f = std::make_unique<FakeDeviceBackend>(topo, &bus, options);
      fake = f.get();
      backend = std::move(f);
    } else {
      backend = make_sim_backend(topo, &bus);
    }
    rt = std::make_unique<Runtime>(std::move(backend), bus);
  }
  TraceBus bus;
  FakeDeviceBackend* fake = nullptr;
  std::unique_ptr<Runtime> rt;
};

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float rtol, float atol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::fabs(a[i] - b[i]), atol + rtol * std::fabs(b[i])) << what << " [" << i << "]";
}

// One forward and backward of a Linear + ReLU + loss, an SGD and an AdamW step, an unscale, an
// add and a cast, on device 1 of `m`; returns every result downloaded, in a fixed order.
std::vector<std::vector<float>> run_every_op(Machine& m, DType dt) {
  Runtime& rt = *m.rt;
  OpContext ctx{rt, 1, 0};
  const int B = 7, C = 13, OC = 5;
  std::vector<std::vector<float>> out;
  Tensor x = upload(rt, 1, random_vec(B * C, 1), {B, C}, dt);
  Tensor w = upload(rt, 1, random_vec(OC * C, 2), {OC, C}, dt);
  Tensor b = upload(rt, 1, random_vec(OC, 3), {OC}, dt);
  Tensor y = Tensor::empty(rt, Device::cuda(1), {B, OC}, dt);
  ops::linear_forward(ctx, y, x, w, b);
  ops::relu_forward(ctx, y);
  out.push_back(download(rt, y));
  Tensor logits = Tensor::empty(rt, Device::cuda(1), {B, OC});
  if (dt == DType::f32) logits = y; else ops::cast(ctx, logits, y);
  std::vector<int32_t> labels{0, 1, 2, 3, 4, 0, 1};
  Tensor t = Tensor::empty(rt, Device::cuda(1), {B}, DType::i32);
  ops::copy_to_device(ctx, t, labels.data());
  Tensor probs = Tensor::empty(rt, Device::cuda(1), {B, OC});
  out.push_back({ops::softmax_cross_entropy_forward(ctx, probs, logits, t)});
  out.push_back({static_cast<float>(ops::accuracy_count(ctx, logits, t))});
  Tensor dlogits = Tensor::empty(rt, Device::cuda(1), {B, OC});
  ops::softmax_cross_entropy_backward(ctx, dlogits, probs, t, 0.5f);
  out.push_back(download(rt, dlogits));
  Tensor dy = dlogits;
  if (dt != DType::f32) {
    dy = Tensor::empty(rt, Device::cuda(1), {B, OC}, dt);
    ops::cast(ctx, dy, dlogits);
  }
  ops::relu_backward(ctx, dy, y);
  Tensor dx = Tensor::empty(rt, Device::cuda(1), {B, C}, dt);
  Tensor dw = upload(rt, 1, std::vector<float>(OC * C, 0.25f), {OC, C});
  Tensor db = upload(rt, 1, std::vector<float>(OC, -0.5f), {OC});
  ops::linear_backward(ctx, &dx, dw, db, dy, x, w);
  out.push_back(download(rt, dx));
  out.push_back(download(rt, dw));
  out.push_back(download(rt, db));
  Tensor p = upload(rt, 1, random_vec(OC * C, 4), {OC, C});
  Tensor buf = Tensor::empty(rt, Device::cuda(1), {OC, C});
  ops::sgd_momentum_step(ctx, p, dw, buf, 0.1f, 0.9f, 1e-4f, true);
  out.push_back(download(rt, p));
  Tensor m1 = upload(rt, 1, std::vector<float>(OC * C, 0.0f), {OC, C});
  Tensor m2 = upload(rt, 1, std::vector<float>(OC * C, 0.0f), {OC, C});
  ops::adamw_step(ctx, p, dw, m1, m2, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
  out.push_back(download(rt, p));
  Tensor found = upload(rt, 1, {0.0f}, {1});
  ops::non_finite_check_and_unscale(ctx, dw, 0.5f, found);
  out.push_back(download(rt, dw));
  out.push_back(download(rt, found));
  ops::add(ctx, p, p, dw);
  out.push_back(download(rt, p));
  return out;
}

TEST(DeviceDispatch, EveryOpRunsThroughTheTableAndMatchesTheSimulator) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Machine sim(false), dev(true);
    const auto expected = run_every_op(sim, dt);
    const auto got = run_every_op(dev, dt);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i)  // ref (the table) against sim: reassociation only
      expect_close(got[i], expected[i], 2e-5f, 2e-6f, "result " + std::to_string(i));
    for (const char* op : {"linear_forward", "relu_forward", "cross_entropy_forward", "accuracy",
                           "cross_entropy_backward", "relu_backward", "linear_backward",
                           "sgd_momentum_step", "adamw_step", "non_finite_check_and_unscale", "add"})
      EXPECT_EQ(dev.fake->table().count(op), 1u) << op;
    EXPECT_EQ(dev.fake->table().count("cast"), dt == DType::f32 ? 0u : 2u);
    for (const std::string& call : dev.fake->table().calls()) EXPECT_EQ(call.substr(call.find('@')), "@1");
  }
}

TEST(DeviceDispatch, ChecksRunBeforeTheTableIsCalled) {
  Machine dev(true);
  Runtime& rt = *dev.rt;
  OpContext ctx{rt, 0, 0};
  Tensor x = Tensor::empty(rt, Device::cuda(0), {4, 3});
  Tensor w = Tensor::empty(rt, Device::cuda(0), {2, 5});  // 5 != 3
  Tensor b = Tensor::empty(rt, Device::cuda(0), {2});
  Tensor y = Tensor::empty(rt, Device::cuda(0), {4, 2});
  EXPECT_THROW(ops::linear_forward(ctx, y, x, w, b), Error);
  Tensor on_other = Tensor::empty(rt, Device::cuda(1), {4, 3});
  EXPECT_THROW(ops::relu_forward(ctx, on_other), Error);  // wrong device
  Tensor ints = Tensor::empty(rt, Device::cuda(0), {4}, DType::i32);
  Tensor out = Tensor::empty(rt, Device::cuda(0), {4}, DType::i32);
  EXPECT_THROW(ops::cast(ctx, out, ints), Error);  // no int cast: refused before the table
  EXPECT_TRUE(dev.fake->table().calls().empty());
}

TEST(DeviceDispatch, AnOutOfRangeTargetIsReportedFromTheDevice) {
  Machine dev(true);
  Runtime& rt = *dev.rt;
  OpContext ctx{rt, 2, 0};
  Tensor logits = upload(rt, 2, random_vec(6, 5), {2, 3});
  Tensor probs = Tensor::empty(rt, Device::cuda(2), {2, 3});
  Tensor t = Tensor::empty(rt, Device::cuda(2), {2}, DType::i32);
  std::vector<int32_t> bad{1, 3};
  ops::copy_to_device(ctx, t, bad.data());
  try {
    ops::softmax_cross_entropy_forward(ctx, probs, logits, t);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "Target 3 is out of bounds.");
    EXPECT_EQ(e.device(), 2);
  }
}

TEST(DeviceDispatch, HostTensorsRunTheHostTableWhateverTheBackend) {
  Machine dev(true);
  Runtime& rt = *dev.rt;
  OpContext host{rt, -1, 0};
  Tensor h = Tensor::empty_host({3});
  h.data<float>()[0] = -1.0f;
  h.data<float>()[1] = 2.0f;
  h.data<float>()[2] = -0.0f;
  ops::relu_forward(host, h);
  EXPECT_EQ(h.data<float>()[0], 0.0f);
  EXPECT_EQ(h.data<float>()[1], 2.0f);
  EXPECT_TRUE(dev.fake->table().calls().empty());  // the device's table was not asked
  EXPECT_EQ(&rt.backend().op_table(), &dev.fake->table());
}

TEST(DeviceDispatch, CatFlatRunsOnTheDevicesTable) {
  Machine dev(true);
  Runtime& rt = *dev.rt;
  OpContext ctx{rt, 3, 0};
  int cats = 0;
  const int id = dev.bus.subscribe([&](const TraceEvent& e) {
    if (e.kind == EventKind::kernel && std::string(e.name) == "cat") ++cats;
  });
  std::vector<Tensor> parts{upload(rt, 3, {1, 2, 3}, {3}), upload(rt, 3, {4, 5, 6, 7}, {2, 2}),
                            upload(rt, 3, {8}, {1})};
  Tensor flat = Tensor::empty(rt, Device::cuda(3), {8});
  dev.fake->table().clear();
  ops::cat_flat(ctx, flat, parts);
  dev.bus.unsubscribe(id);
  EXPECT_EQ(download(rt, flat), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(dev.fake->table().calls(), (std::vector<std::string>{"cat@3"}));
  EXPECT_EQ(cats, 1);  // one kernel reported, with its cost
}

TEST(DeviceDispatch, Tf32SwitchReachesTheTableAndNotTheSimulator) {
  Machine dev(true), sim(false);
  EXPECT_FALSE(ops::allow_tf32(*dev.rt));
  ops::set_allow_tf32(*dev.rt, true);
  EXPECT_TRUE(ops::allow_tf32(*dev.rt));
  EXPECT_TRUE(dev.fake->table().allow_tf32());
  ops::set_allow_tf32(*sim.rt, true);
  EXPECT_FALSE(ops::allow_tf32(*sim.rt));
}

// Five steps of the reference MLP shape (smaller widths), optionally under fp16 autocast with a
// GradScaler whose first scale overflows fp16 (so the first step is skipped and the scale backs
// off), optionally through DataParallel over `devices`. Returns the weights and the scales seen.
struct TrainRun {
  std::vector<std::vector<float>> weights;
  std::vector<double> scales;
  int skipped = 0;
};

TrainRun train(Machine& m, bool fp16, const std::vector<int>& devices = {0}) {
  Runtime& rt = *m.rt;
  OpContext ctx{rt, devices[0], 0};
  const int64_t B = 24;
  MLP model(rt, devices[0], {32, 16, 16, 10});
  model.init_parameters(ctx, 11);
  SGD opt(model.parameters(), 0.05f, 0.9f);
  CrossEntropyLoss ce;
  GradScalerOptions so;
  so.enabled = fp16;
  so.init_scale = 4194304.0;  // 2^22: the fp16 gradients overflow until the scale has backed off
  so.growth_interval = 2;
  GradScaler scaler(so);
  std::unique_ptr<DataParallel> dp;
  if (devices.size() > 1) dp = std::make_unique<DataParallel>(rt, model, devices);
  const DType autocast = fp16 ? DType::f16 : DType::f32;
  TrainRun r;
  for (int step = 0; step < 5; ++step) {
    std::vector<float> xs = random_vec(static_cast<size_t>(B * 32), 100 + step);
    Tensor x = Tensor::empty_host({B, 32});
    std::copy(xs.begin(), xs.end(), x.data<float>());
    std::vector<int32_t> labels(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 3 + step) % 10);
    Tensor y = Tensor::empty(rt, Device::cuda(devices[0]), {B}, DType::i32);
    ops::copy_to_device(ctx, y, labels.data());
    OpContext amp{rt, devices[0], 0, autocast};
    Tensor logits;
    if (dp) {
      logits = dp->forward(amp, x);
    } else {
      Tensor xd = Tensor::empty(rt, Device::cuda(devices[0]), x.shape());
      ops::copy_(ctx, xd, x);
      logits = model.forward(amp, xd);
    }
    ce.forward(ctx, logits, y);
    Tensor dlogits = ce.backward(ctx, scaler.loss_scale());
    if (dp) dp->backward(ctx, dlogits);
    else model.backward(ctx, dlogits);
    r.scales.push_back(scaler.get_scale());
    if (!scaler.step(ctx, opt)) ++r.skipped;
    scaler.update();
    opt.zero_grad(ctx);
  }
  for (Parameter& p : model.parameters()) r.weights.push_back(model.parameter_values(ctx, p.name));
  return r;
}

void expect_same_run(const TrainRun& got, const TrainRun& expected, float rtol, float atol) {
  EXPECT_EQ(got.scales, expected.scales);
  EXPECT_EQ(got.skipped, expected.skipped);
  ASSERT_EQ(got.weights.size(), expected.weights.size());
  for (size_t p = 0; p < got.weights.size(); ++p)
    expect_close(got.weights[p], expected.weights[p], rtol, atol, "parameter " + std::to_string(p));
}

TEST(DeviceDispatch, TrainingThroughTheTableMatchesTheSimulator) {
  Machine sim(false), dev(true);
  expect_same_run(train(dev, false), train(sim, false), 1e-5f, 1e-6f);
}

TEST(DeviceDispatch, GradScalerReadsItsFlagsWithCopiesAndSkipsTheSameSteps) {
  Machine sim(false), dev(true);
  const TrainRun expected = train(sim, true);
  const TrainRun got = train(dev, true);
  ASSERT_GT(expected.skipped, 0) << "the test needs an overflow";
  ASSERT_LT(expected.skipped, 5) << "the test needs steps that were taken";
  expect_same_run(got, expected, 1e-3f, 1e-5f);  // fp16 activations: a rounding may flip
}

TEST(DeviceDispatch, DataParallelWithAndWithoutCollectivesMatchesTheSimulator) {
  Machine sim(false), peer(true), nccl(true, FakeDeviceBackend::Options{/*collectives=*/true});
  const std::vector<int> ids{0, 1, 2};
  const TrainRun expected = train(sim, false, ids);
  expect_same_run(train(peer, false, ids), expected, 1e-5f, 1e-6f);
  EXPECT_TRUE(peer.fake->collective_calls().empty());
  expect_same_run(train(nccl, false, ids), expected, 1e-5f, 1e-6f);
  const std::vector<std::string> calls = nccl.fake->collective_calls();
  // Per step: one broadcast bucket (the parameters fit in 10 MiB) and one reduce bucket.
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "broadcast"), 5);
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "reduce_sum"), 5);
}

// cuBLAS's workspace as PyTorch keeps it (issue 14): taken from the device's caching allocator
// before the device's first GEMM, once, counted by memory_allocated, kept through empty_cache.
TEST(GemmWorkspace, TakenFromTheCachingAllocatorBeforeTheDevicesFirstGemmAndKept) {
  constexpr size_t kBytes = 8519680;  // PyTorch's default off Hopper (:4096:2:16:8)
  Machine dev(true);
  dev.fake->table().want_gemm_workspace(kBytes);
  Runtime& rt = *dev.rt;
  OpContext ctx{rt, 1, 0};
  Tensor x = upload(rt, 1, random_vec(4 * 3, 1), {4, 3});
  Tensor w = upload(rt, 1, random_vec(2 * 3, 2), {2, 3});
  Tensor b = upload(rt, 1, random_vec(2, 3), {2});
  Tensor y = Tensor::empty(rt, Device::cuda(1), {4, 2});
  ops::relu_forward(ctx, x);  // not a GEMM: no workspace yet
  const size_t tensors = rt.memory_allocated(1);
  EXPECT_EQ(dev.fake->table().count("set_gemm_workspace"), 0u);
  ops::linear_forward(ctx, y, x, w, b);  // the table asserts the workspace came first
  EXPECT_EQ(rt.memory_allocated(1), tensors + kBytes);
  Tensor dx = Tensor::empty(rt, Device::cuda(1), {4, 3});
  Tensor dw = Tensor::empty(rt, Device::cuda(1), {2, 3});
  Tensor db = Tensor::empty(rt, Device::cuda(1), {2});
  const size_t before_backward = rt.memory_allocated(1);
  ops::linear_backward(ctx, &dx, dw, db, y, x, w);
  EXPECT_EQ(dev.fake->table().count("set_gemm_workspace"), 1u);  // once per device
  rt.empty_cache();
  EXPECT_EQ(rt.memory_allocated(1), before_backward) << "the workspace outlives empty_cache";
  EXPECT_GE(rt.memory_reserved(1), kBytes);
  EXPECT_EQ(rt.memory_allocated(0), 0u) << "no GEMM ran on cuda:0";
}

TEST(GemmWorkspace, DataParallelTakesOneOnEveryReplicasDevice) {
  constexpr size_t kBytes = 33554432;  // PyTorch's default on Hopper
  Machine plain(true), dev(true);
  dev.fake->table().want_gemm_workspace(kBytes);
  const std::vector<int> ids{0, 1, 2};
  expect_same_run(train(dev, false, ids), train(plain, false, ids), 0.0f, 0.0f);
  for (int d : ids) {
    EXPECT_EQ(dev.fake->table().count("set_gemm_workspace"), 3u);
    // The model, replicas and activations are gone with train()'s scope: what stays is the workspace.
    EXPECT_EQ(dev.rt->memory_allocated(d), kBytes) << "cuda:" << d;
    EXPECT_EQ(plain.rt->memory_allocated(d), 0u) << "cuda:" << d;
  }
  EXPECT_EQ(dev.rt->memory_allocated(3), 0u) << "cuda:3 ran no GEMM";
}

TEST(DeviceDispatch, ReduceAddUsesTheCollectiveOnlyForDistinctDevices) {
  Machine nccl(true, FakeDeviceBackend::Options{/*collectives=*/true});
  Runtime& rt = *nccl.rt;
  OpContext ctx{rt, 0, 0};
  Tensor a = upload(rt, 0, {1, 2}, {2}), b = upload(rt, 1, {10, 20}, {2}), c = upload(rt, 0, {100, 200}, {2});
  EXPECT_EQ(download(rt, parallel::reduce_add(ctx, {a, b}, 0)), (std::vector<float>{11, 22}));
  EXPECT_EQ(nccl.fake->collective_calls().size(), 1u);
  // Two inputs on cuda:0: NCCL needs one rank per device; the peer-copy path adds them.
  EXPECT_EQ(download(rt, parallel::reduce_add(ctx, {a, c, b}, 0)), (std::vector<float>{111, 222}));
  EXPECT_EQ(nccl.fake->collective_calls().size(), 1u);
}

}  // namespace
}  // namespace furnace
