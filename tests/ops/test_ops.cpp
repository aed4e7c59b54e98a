// The sim ops against the ref ops (the truth), the Tensor-level dispatch checks, and a
// finite-difference check of the MLP's backward through the whole model and loss.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "furnace/error.h"
#include "furnace/nn.h"
#include "furnace/ops.h"
#include "furnace/random.h"
#include "furnace/topology.h"
#include "backend/cpu/cpu_kernels.h"
#include "ops/ref/ref_ops.h"
#include "parallel/comm.h"  // defines: parallel::add_across_devices
#include "support/test_support.h"  // defines: random_vec

namespace furnace {
namespace {

using test_support::random_vec;

// |a - b| <= atol + rtol * |ref| elementwise (a NaN is never close); fp32 sums in a different
// order than the double ref.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, float atol,
                  float rtol, const char* what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const float err = std::fabs(got[i] - ref[i]);
    if (!(err <= atol + rtol * std::fabs(ref[i]))) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " ref " << ref[i] << " (|error| " << err
                    << " > " << atol << " + " << rtol << " x |ref|)";
      return;  // the first is enough
    }
  }
}

// Small shapes that still reach every branch: B=1, odd sizes, bias on and off.
struct LinearShape {
  int B, C, OC;
};
class LinearOps : public ::testing::TestWithParam<LinearShape> {};

TEST_P(LinearOps, SimMatchesRef) {
  const auto [B, C, OC] = GetParam();
  auto inp = random_vec(static_cast<size_t>(B * C), 1), w = random_vec(static_cast<size_t>(OC * C), 2),
       b = random_vec(static_cast<size_t>(OC), 3), dout = random_vec(static_cast<size_t>(B * OC), 4);
  for (bool with_bias : {true, false}) {
    std::vector<float> out_ref(static_cast<size_t>(B * OC)), out_sim(out_ref.size());
    ref::linear_forward(out_ref.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, B, C, OC);
    cpu::linear_forward(out_sim.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, B, C, OC);
    expect_close(out_sim, out_ref, 1e-5f, 1e-5f, "linear_forward");
  }
  // Backward accumulates into dweight/dbias: start both from the same non-zero values.
  auto dw0 = random_vec(static_cast<size_t>(OC * C), 5), db0 = random_vec(static_cast<size_t>(OC), 6);
  std::vector<float> dinp_ref(static_cast<size_t>(B * C)), dinp_sim(dinp_ref.size());
  auto dw_ref = dw0, dw_sim = dw0, db_ref = db0, db_sim = db0;
  ref::linear_backward(dinp_ref.data(), dw_ref.data(), db_ref.data(), dout.data(), inp.data(), w.data(), B, C, OC);
  cpu::linear_backward(dinp_sim.data(), dw_sim.data(), db_sim.data(), dout.data(), inp.data(), w.data(), B, C, OC);
  expect_close(dinp_sim, dinp_ref, 1e-5f, 1e-5f, "dinp");
  expect_close(dw_sim, dw_ref, 1e-5f, 1e-5f, "dweight");
  expect_close(db_sim, db_ref, 1e-5f, 1e-5f, "dbias");
  // And dinp may be skipped.
  cpu::linear_backward(nullptr, dw_sim.data(), db_sim.data(), dout.data(), inp.data(), w.data(), B, C, OC);
  // Without accumulate (a fresh .grad) both WRITE the gradients, whatever the buffers held: the
  // same values as accumulating into zeros, bit for bit (adding to +0 is exact).
  for (bool use_sim : {false, true}) {
    const size_t nw = static_cast<size_t>(OC * C), nb = static_cast<size_t>(OC);
    std::vector<float> zw(nw, 0.0f), zb(nb, 0.0f), gw(nw, std::nanf("")), gb(nb, -7.0f);
    auto run = use_sim ? cpu::linear_backward : ref::linear_backward;
    run(nullptr, zw.data(), zb.data(), dout.data(), inp.data(), w.data(), B, C, OC, true);
    run(nullptr, gw.data(), gb.data(), dout.data(), inp.data(), w.data(), B, C, OC, false);
    EXPECT_EQ(gw, zw) << (use_sim ? "sim" : "ref") << " dweight";
    EXPECT_EQ(gb, zb) << (use_sim ? "sim" : "ref") << " dbias";
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearOps,
                         ::testing::Values(LinearShape{1, 1, 1}, LinearShape{1, 7, 3},
                                           LinearShape{5, 13, 11}, LinearShape{64, 784, 10},
                                           LinearShape{33, 64, 65}));

TEST(Ops, ReluSimMatchesRef) {
  auto x = random_vec(1001, 7);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = NAN;
  auto a = x, b = x;
  ref::relu_forward(a.data(), 1001);
  cpu::relu_forward(b.data(), 1001);
  // The same value, or NaN on both sides.
  const auto same = [](float p, float q) { return p == q || (std::isnan(p) && std::isnan(q)); };
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same(a[i], b[i])) << i << ": " << a[i] << " vs " << b[i];
  EXPECT_TRUE(std::isnan(b[2]));  // torch.relu(nan) is nan
  EXPECT_EQ(b[0], 0.0f);
  auto d = random_vec(1001, 8);
  auto da = d, db = d;
  ref::relu_backward(da.data(), a.data(), 1001);
  cpu::relu_backward(db.data(), b.data(), 1001);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same(da[i], db[i])) << i << ": " << da[i] << " vs " << db[i];
  EXPECT_EQ(db[0], 0.0f);  // gradient of relu at 0 is 0, as PyTorch
}

TEST(Ops, CrossEntropySimMatchesRefAndKnownValue) {
  const int B = 9, V = 10;
  auto logits = random_vec(B * V, 9, -5, 5);
  logits[3] = 80.0f;  // large logits must not overflow (max subtraction)
  std::vector<int32_t> t = {0, 1, 2, 3, 4, 5, 6, 7, 9};
  std::vector<float> pr(B * V), ps(B * V);
  const float lr = ref::softmax_cross_entropy_forward(pr.data(), logits.data(), t.data(), B, V);
  const float ls = cpu::softmax_cross_entropy_forward(ps.data(), logits.data(), t.data(), B, V);
  EXPECT_NEAR(ls, lr, 1e-5);
  expect_close(ps, pr, 1e-6f, 1e-5f, "probs");
  std::vector<float> gr(B * V), gs(B * V);
  ref::softmax_cross_entropy_backward(gr.data(), pr.data(), t.data(), B, V, 0.5f);
  cpu::softmax_cross_entropy_backward(gs.data(), ps.data(), t.data(), B, V, 0.5f);
  expect_close(gs, gr, 1e-6f, 1e-5f, "dlogits");
  // Uniform logits: loss is log(V) exactly.
  std::vector<float> zeros(B * V, 0.0f);
  EXPECT_NEAR(cpu::softmax_cross_entropy_forward(ps.data(), zeros.data(), t.data(), B, V), std::log(10.0), 1e-6);
}

TEST(Ops, AccuracyPicksTheFirstMaximum) {
  std::vector<float> logits = {1, 3, 3, 0, /**/ 5, 5, 1, 1};
  std::vector<int32_t> t = {1, 1};
  EXPECT_EQ(ref::accuracy_count(logits.data(), t.data(), 2, 4), 1);
  EXPECT_EQ(cpu::accuracy_count(logits.data(), t.data(), 2, 4), 1);
}

TEST(Ops, SgdMomentumMatchesRefAndPyTorchRule) {
  auto p = random_vec(100, 10), g = random_vec(100, 11);
  for (float wd : {0.0f, 0.01f}) {
    auto pr = p, ps = p;
    std::vector<float> br(100), bs(100);
    for (int step = 0; step < 3; ++step) {
      ref::sgd_momentum_step(pr.data(), g.data(), br.data(), 100, 0.1f, 0.9f, wd, step == 0);
      cpu::sgd_momentum_step(ps.data(), g.data(), bs.data(), 100, 0.1f, 0.9f, wd, step == 0);
    }
    expect_close(ps, pr, 1e-6f, 1e-6f, "param");
  }
  // By hand, wd=0: buf = g, then 0.9 g + g, then 0.9*1.9 g + g = 2.71 g; p -= 0.1 * (1 + 1.9 + 2.71) g.
  auto pr = p;
  std::vector<float> br(100);
  for (int step = 0; step < 3; ++step) ref::sgd_momentum_step(pr.data(), g.data(), br.data(), 100, 0.1f, 0.9f, 0.0f, step == 0);
  EXPECT_NEAR(pr[5], p[5] - 0.1f * 5.61f * g[5], 1e-5);
}

struct SimOps : ::testing::Test {
  TraceBus bus;
  Topology topo = load_topology("laptop-4060");
  Runtime rt{make_sim_backend(topo, &bus), bus};
  OpContext ctx{rt, 0, 0};
};

TEST_F(SimOps, DispatchChecksShapesAndDevices) {
  Tensor x = Tensor::empty(rt, Device::cuda(0), {4, 3});
  Tensor w = Tensor::empty(rt, Device::cuda(0), {5, 7});
  Tensor b = Tensor::empty(rt, Device::cuda(0), {5});
  Tensor out = Tensor::empty(rt, Device::cuda(0), {4, 5});
  try {
    ops::linear_forward(ctx, out, x, w, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "mat1 and mat2 shapes cannot be multiplied (4x3 and 7x5)");
  }
  Tensor host = Tensor::empty_host({4, 7});
  try {
    ops::linear_forward(ctx, out, host, w, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Expected all tensors to be on the same device, but got mat1 is on cpu, "
                           "different from other tensors on cuda:0 (when checking argument in "
                           "method wrapper_CUDA_addmm)");
  }
  Tensor labels = Tensor::empty(rt, Device::cuda(0), {4}, DType::i32);
  std::vector<int32_t> bad = {0, 1, 12, 2};
  ops::copy_to_device(ctx, labels, bad.data());
  Tensor probs = Tensor::empty(rt, Device::cuda(0), {4, 5});
  EXPECT_THROW(ops::softmax_cross_entropy_forward(ctx, probs, out, labels), Error);
}

TEST_F(SimOps, KernelsAdvanceTheModelledClockAndReachTheTrace) {
  std::vector<TraceEvent> seen;
  int id = bus.subscribe([&](const TraceEvent& e) { if (e.kind == EventKind::kernel) seen.push_back(e); });
  Tensor x = Tensor::empty(rt, Device::cuda(0), {256, 784});
  Tensor w = Tensor::empty(rt, Device::cuda(0), {512, 784});
  Tensor b = Tensor::empty(rt, Device::cuda(0), {512});
  Tensor out = Tensor::empty(rt, Device::cuda(0), {256, 512});
  ops::zero(ctx, x); ops::zero(ctx, w); ops::zero(ctx, b);
  seen.clear();
  const double t0 = rt.backend().device_time(0);
  ops::linear_forward(ctx, out, x, w, b);
  const double t1 = rt.backend().device_time(0);
  bus.unsubscribe(id);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_STREQ(seen[0].name, "linear_forward");
  EXPECT_DOUBLE_EQ(seen[0].flops, 2.0 * 256 * 784 * 512);
  EXPECT_NEAR(t1 - t0, model_kernel_seconds(topo.gpus[0], {seen[0].flops, static_cast<double>(seen[0].bytes), DType::f32}), 1e-9);
  EXPECT_DOUBLE_EQ(seen[0].start_s, t0);
}

// Central differences through MLP + CrossEntropyLoss on a tiny model. fp32 with eps 1e-2 on a
// smooth-enough loss: agreement within 1e-3 absolute catches a wrong sign, a missing term or a
// transposed GEMM, which is what this test is for.
TEST_F(SimOps, MlpBackwardMatchesFiniteDifferences) {
  const int B = 4;
  MLP model(rt, 0, {6, 5, 4, 3});
  model.init_parameters(ctx, 42);
  auto xs = random_vec(B * 6, 12);
  std::vector<int32_t> ys = {0, 2, 1, 2};
  Tensor x = Tensor::empty(rt, Device::cuda(0), {B, 6});
  Tensor y = Tensor::empty(rt, Device::cuda(0), {B}, DType::i32);
  ops::copy_to_device(ctx, x, xs.data());
  ops::copy_to_device(ctx, y, ys.data());
  CrossEntropyLoss ce;
  auto loss_at = [&] {
    Tensor logits = model.forward(ctx, x);
    float l = ce.forward(ctx, logits, y);
    ce.release();
    model.release_activations();
    return static_cast<double>(l);
  };
  Tensor logits = model.forward(ctx, x);
  ce.forward(ctx, logits, y);
  model.backward(ctx, ce.backward(ctx));
  for (Parameter& p : model.parameters()) {
    std::vector<float> grad(static_cast<size_t>(p.grad->numel()));
    ops::copy_to_host(ctx, grad.data(), *p.grad);
    std::vector<float> v = model.parameter_values(ctx, p.name);
    for (size_t i = 0; i < v.size(); i += 3) {
      const float orig = v[i];
      const float eps = 1e-3f;
      v[i] = orig + eps;
      model.load_parameter(ctx, p.name, v);
      const double up = loss_at();
      v[i] = orig - eps;
      model.load_parameter(ctx, p.name, v);
      const double down = loss_at();
      v[i] = orig;
      model.load_parameter(ctx, p.name, v);
      EXPECT_NEAR(grad[i], (up - down) / (2 * eps), 1e-3) << p.name << "[" << i << "]";
    }
  }
}

// ---- the ops DataParallel adds: add, add_n (reduce-add's sum), copy_, cat, narrow ---------------

TEST(Ops, AddAndAddNSimMatchRefBitForBit) {
  for (int64_t n : {1, 7, 4096, 4097, 10000}) {
    std::vector<std::vector<float>> t;
    for (int j = 0; j < 5; ++j) t.push_back(random_vec(static_cast<size_t>(n), 40 + j, -100.0f, 100.0f));
    std::vector<float> r(static_cast<size_t>(n)), s(static_cast<size_t>(n));
    ref::add(r.data(), t[0].data(), t[1].data(), n);
    cpu::add(s.data(), t[0].data(), t[1].data(), n);
    EXPECT_EQ(r, s);
    auto in_place = t[0];  // out may be the first input (add_)
    cpu::add(in_place.data(), in_place.data(), t[1].data(), n);
    EXPECT_EQ(in_place, r);
    for (int count = 1; count <= 5; ++count) {
      std::vector<const float*> ptrs;
      for (int j = 0; j < count; ++j) ptrs.push_back(t[static_cast<size_t>(j)].data());
      ref::add_n(r.data(), ptrs.data(), count, n);
      cpu::add_n(s.data(), ptrs.data(), count, n);
      EXPECT_EQ(r, s) << "count " << count << " n " << n;
      // The same roundings as adding whole tensors one after another.
      std::vector<float> seq = t[0];
      for (int j = 1; j < count; ++j) ref::add(seq.data(), seq.data(), t[static_cast<size_t>(j)].data(), n);
      EXPECT_EQ(s, seq);
    }
  }
}

TEST(Tensor, NarrowIsAViewOfRows) {
  Tensor t = Tensor::empty_host({5, 3});
  for (int i = 0; i < 15; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor v = t.narrow(0, 2, 2);
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_TRUE(v.shares_storage_with(t));
  EXPECT_EQ(v.data<float>()[0], 6.0f);
  EXPECT_EQ(v.narrow(0, 1, 1).data<float>()[2], 11.0f);
  EXPECT_EQ(t.narrow(0, 5, 0).numel(), 0);
  try {
    t.narrow(0, 4, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "start (4) + length (2) exceeds dimension size (5).");
  }
}

struct FourGpus : ::testing::Test {
  TraceBus bus;
  Topology topo = load_topology("workstation-4x3090");
  Runtime rt{make_sim_backend(topo, &bus), bus};
  std::vector<TraceEvent> events;
  int id = bus.subscribe([this](const TraceEvent& e) {
    if (e.kind == EventKind::copy || e.kind == EventKind::kernel) events.push_back(e);
  });
  ~FourGpus() override { bus.unsubscribe(id); }
  Tensor on(int device, const std::vector<float>& v) {
    Tensor t = Tensor::empty(rt, Device::cuda(device), {static_cast<int64_t>(v.size())});
    OpContext c{rt, device, 0};
    ops::copy_to_device(c, t, v.data());
    return t;
  }
  std::vector<float> values(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    OpContext c{rt, t.device().index, 0};
    ops::copy_to_host(c, v.data(), t);
    return v;
  }
};

TEST_F(FourGpus, CopyBetweenAnyTwoPlacesAndCatFlattens) {
  auto v = random_vec(10, 50);
  Tensor a = on(0, v);
  Tensor b = Tensor::empty(rt, Device::cuda(2), {10});
  OpContext ctx{rt, 0, 0};
  events.clear();
  ops::copy_(ctx, b, a);  // peer
  ASSERT_EQ(events.size(), 1u);
  EXPECT_STREQ(events[0].name, "peer");
  EXPECT_EQ(events[0].device, 0);  // ATen runs it on the source's stream
  EXPECT_EQ(values(b), v);
  Tensor h = Tensor::empty_host({10});
  ops::copy_(ctx, h, b);  // d2h
  EXPECT_EQ(std::vector<float>(h.data<float>(), h.data<float>() + 10), v);
  Tensor flat = Tensor::empty(rt, Device::cuda(0), {20});
  ops::cat_flat(ctx, flat, {a, a});
  auto f = values(flat);
  EXPECT_EQ(std::vector<float>(f.begin() + 10, f.end()), v);
}

TEST_F(FourGpus, PeerCopiesAreATwoWayBarrierOnBothStreams) {
  // Two 25 MB copies out of cuda:0 (PCIe through the host, 25 GB/s + 10 us): the second waits
  // for the first on cuda:0's stream; each holds the destination's stream too.
  const size_t bytes = 25u << 20;
  Backend& b = rt.backend();
  const double one = model_copy_seconds(static_cast<double>(bytes), topo.host.pinned_bandwidth, topo.host.latency_s);
  ASSERT_TRUE(b.model_copy(CopyKind::peer, 1, 0, bytes, 0, false));
  ASSERT_TRUE(b.model_copy(CopyKind::peer, 2, 0, bytes, 0, false));
  EXPECT_NEAR(b.device_time(0), 2 * one, 1e-12);
  EXPECT_NEAR(b.device_time(1), one, 1e-12);
  EXPECT_NEAR(b.device_time(2), 2 * one, 1e-12);  // started only once cuda:0 was free
  EXPECT_NEAR(b.device_busy_time(0), 2 * one, 1e-12);
  EXPECT_NEAR(b.device_busy_time(2), one, 1e-12);
  // A destination that is busy delays the copy: cuda:3 works for 1 s first.
  b.account_kernel(3, 0, "long", KernelCost{35.6e12, 0, DType::f32});
  const double t3 = b.device_time(3);
  ASSERT_TRUE(b.model_copy(CopyKind::peer, 3, 0, bytes, 0, false));
  EXPECT_NEAR(b.device_time(0), t3 + one, 1e-12);
  EXPECT_NEAR(b.device_time(3), t3 + one, 1e-12);
}

TEST_F(FourGpus, AddAcrossDevicesIsReduceAddsArithmeticAndModelsItsCopies) {
  std::vector<std::vector<float>> v;
  std::vector<Tensor> terms;
  for (int d : {2, 0, 1, 3}) {  // root first: the destination is cuda:2
    v.push_back(random_vec(1000, 60 + static_cast<uint64_t>(d)));
    terms.push_back(on(d, v.back()));
  }
  OpContext ctx{rt, 2, 0};
  const size_t before = rt.max_memory_allocated(2);
  events.clear();
  Tensor sum = parallel::add_across_devices(ctx, terms);
  std::vector<float> expect(1000);
  for (size_t i = 0; i < 1000; ++i) expect[i] = ((v[0][i] + v[1][i]) + v[2][i]) + v[3][i];
  EXPECT_EQ(values(sum), expect);  // bit for bit
  EXPECT_EQ(sum.device(), Device::cuda(2));
  int peers = 0, adds = 0;
  for (const TraceEvent& e : events) {
    peers += std::string(e.name) == "peer";
    adds += std::string(e.name) == "add";
  }
  EXPECT_EQ(peers, 3);  // other.to(cuda:2) for each other term
  EXPECT_EQ(adds, 3);   // one add, then add_ twice
  // The temporaries were allocated on cuda:2 (one at a time, next to the result).
  EXPECT_GE(rt.max_memory_allocated(2), before + 2 * 4096);
}

}  // namespace
}  // namespace furnace
