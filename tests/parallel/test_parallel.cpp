// DataParallel's verbs and the module, against shared/reference/semantics.md section 2: the chunk
// table, scatter/gather and their backward partners, coalesced broadcast and reduce-add (a SUM),
// replicate, parallel_apply (concurrency and the "in replica i on device d" label), the
// constructor's errors and warnings in PyTorch's words, and DP == one device after 5 SGD steps.
// This executable carries the ctest label "threads": the tsan preset runs it under ThreadSanitizer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <limits>
#include <vector>

#include "furnace/error.h"
#include "furnace/process.h"
#include "furnace/nn.h"
#include "furnace/parallel.h"
#include "furnace/random.h"
#include "furnace/topology.h"
#include "parallel/comm.h"
#include "support/test_support.h"  // defines: random_vec

namespace furnace {
namespace {

using test_support::host_tensor;
using test_support::random_vec;

using parallel::chunk_sizes;

std::vector<float> host_values(Runtime& rt, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  Tensor h = Tensor::empty_host(t.shape());
  OpContext ctx{rt, t.device().is_cuda() ? t.device().index : 0, 0};
  ops::copy_(ctx, h, t);
  std::copy(h.data<float>(), h.data<float>() + t.numel(), out.begin());
  return out;
}

// A machine of `topology` as one process sees it, with the events it emits.
struct Machine {
  explicit Machine(const std::string& topology)
      : topo(load_topology(topology)), rt(make_sim_backend(topo, &bus), bus) {
    id = bus.subscribe([this](const TraceEvent& e) {
      if (e.kind == EventKind::copy || e.kind == EventKind::kernel || e.kind == EventKind::phase) events.push_back(e);
    });
  }
  ~Machine() { bus.unsubscribe(id); }
  int count(EventKind kind, const std::string& name) const {
    int n = 0;
    for (const TraceEvent& e : events) n += e.kind == kind && name == e.name;
    return n;
  }
  TraceBus bus;
  Topology topo;
  Runtime rt;
  std::vector<TraceEvent> events;  // the bus locks dispatch: workers may emit concurrently
  int id = 0;
};

// ---- chunking --------------------------------------------------------------------------------

struct ChunkRow {
  int64_t n;
  int k;
  std::vector<int64_t> sizes;
};

// The rows of semantics.md (checked there with torch.chunk in PyTorch 1.13), then more: ceil(n/k)
// per chunk, so the replica count is ceil(n / ceil(n/k)), which can be below k.
const std::vector<ChunkRow> kChunkTable = {
    {10, 4, {3, 3, 3, 1}}, {3, 4, {1, 1, 1}},        {6, 4, {2, 2, 2}},
    {5, 4, {2, 2, 1}},     {7, 4, {2, 2, 2, 1}},     {9, 4, {3, 3, 3}},
    {13, 4, {4, 4, 4, 1}}, {17, 4, {5, 5, 5, 2}},    {1, 4, {1}},
    {10, 8, {2, 2, 2, 2, 2}}, {9, 8, {2, 2, 2, 2, 1}}, {0, 4, {0, 0, 0, 0}},
    {256, 4, {64, 64, 64, 64}}, {250, 4, {63, 63, 63, 61}}, {8, 3, {3, 3, 2}},
    {1, 1, {1}},           {7, 1, {7}},              {12, 8, {2, 2, 2, 2, 2, 2}},
    {100, 3, {34, 34, 32}}, {0, 1, {0}},             {2, 2, {1, 1}},
    {208, 8, {26, 26, 26, 26, 26, 26, 26, 26}},     {15, 8, {2, 2, 2, 2, 2, 2, 2, 1}},
};

TEST(Chunk, FollowsTorchChunkForEveryRowOfTheTable) {
  ASSERT_GE(kChunkTable.size(), 15u);
  for (const ChunkRow& row : kChunkTable)
    EXPECT_EQ(chunk_sizes(row.n, row.k), row.sizes) << "N=" << row.n << " k=" << row.k;
}

// Arithmetic, never a materialised batch and never an overflow: torch.chunk on any row count.
TEST(Chunk, HugeBatchesAreArithmetic) {
  EXPECT_EQ(chunk_sizes(2147483648, 4), (std::vector<int64_t>{536870912, 536870912, 536870912, 536870912}));
  const int64_t max = std::numeric_limits<int64_t>::max();  // 9223372036854775807 = 4 * 2305843009213693952 - 1
  EXPECT_EQ(chunk_sizes(max, 4), (std::vector<int64_t>{2305843009213693952, 2305843009213693952,
                                                       2305843009213693952, 2305843009213693951}));
  EXPECT_EQ(chunk_sizes(max, 1), (std::vector<int64_t>{max}));
  EXPECT_EQ(chunk_sizes(max - 1, 8).size(), 8u);
}

TEST(Chunk, RejectsZeroChunks) {
  try {
    chunk_sizes(10, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "chunk expects `chunks` to be greater than 0, got: 0");
  }
}

// ---- scatter and gather -----------------------------------------------------------------------

TEST(Scatter, HostBatchGoesToEachDeviceAndFewerChunksMeanFewerReplicas) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  auto v = random_vec(6 * 3, 1);
  Tensor x = host_tensor(v, {6, 3});
  std::vector<Tensor> chunks = parallel::scatter(ctx, x, {0, 1, 2, 3});
  ASSERT_EQ(chunks.size(), 3u);  // N=6, k=4: chunk size 2, three chunks: cuda:3 gets nothing
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(chunks[i].device(), Device::cuda(static_cast<int>(i)));
    EXPECT_EQ(chunks[i].shape(), (Shape{2, 3}));
    EXPECT_EQ(host_values(m.rt, chunks[i]), std::vector<float>(v.begin() + 6 * i, v.begin() + 6 * (i + 1)));
  }
  EXPECT_EQ(m.count(EventKind::copy, "h2d"), 3);
}

TEST(Scatter, AChunkAlreadyOnItsDeviceIsAViewNotACopy) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 1, 0};
  auto v = random_vec(10 * 2, 2);
  Tensor x = Tensor::empty(m.rt, Device::cuda(1), {10, 2});
  ops::copy_(ctx, x, host_tensor(v, {10, 2}));
  m.events.clear();
  std::vector<Tensor> chunks = parallel::scatter(ctx, x, {1, 0, 2, 3});
  ASSERT_EQ(chunks.size(), 4u);  // 3,3,3,1
  EXPECT_TRUE(chunks[0].shares_storage_with(x));  // cuda:1 is where x lives
  for (size_t i = 1; i < 4; ++i) EXPECT_FALSE(chunks[i].shares_storage_with(x));
  EXPECT_EQ(m.count(EventKind::copy, "peer"), 3);
  EXPECT_EQ(host_values(m.rt, chunks[3]), std::vector<float>(v.begin() + 18, v.end()));
  // N = 0: k empty chunks, all copied (nothing to copy).
  Tensor empty = Tensor::empty_host({0, 2});
  EXPECT_EQ(parallel::scatter(ctx, empty, {0, 1, 2, 3}).size(), 4u);
}

TEST(Gather, ConcatenatesOnTheOutputDeviceAndItsBackwardScattersInTheSameSizes) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  std::vector<Tensor> outs;
  std::vector<float> all;
  for (int d = 0; d < 3; ++d) {
    auto v = random_vec(static_cast<size_t>(d + 1) * 2, 10 + d);
    all.insert(all.end(), v.begin(), v.end());
    Tensor t = Tensor::empty(m.rt, Device::cuda(d), {d + 1, 2});
    ops::copy_(ctx, t, host_tensor(v, {d + 1, 2}));
    outs.push_back(t);
  }
  parallel::GatherRecord rec;
  Tensor g = parallel::gather(ctx, outs, Device::cuda(2), &rec);
  EXPECT_EQ(g.device(), Device::cuda(2));
  EXPECT_EQ(g.shape(), (Shape{6, 2}));
  EXPECT_EQ(host_values(m.rt, g), all);
  EXPECT_EQ(rec.input_sizes, (std::vector<int64_t>{1, 2, 3}));
  std::vector<Tensor> back = parallel::gather_backward(ctx, g, rec);
  ASSERT_EQ(back.size(), 3u);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(back[d].device(), Device::cuda(d));
    EXPECT_EQ(host_values(m.rt, back[d]), host_values(m.rt, outs[d]));
  }
  EXPECT_TRUE(back[2].shares_storage_with(g));  // the output device's piece is a view
  // Scatter's backward gathers onto the input's device: here the host.
  Tensor to_host = parallel::scatter_backward(ctx, outs, Device::cpu());
  EXPECT_EQ(to_host.device(), Device::cpu());
  EXPECT_EQ(host_values(m.rt, to_host), all);
}

TEST(Gather, ScalarsWarnInPyTorchsWordsAndBecomeAVector) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  std::vector<Tensor> losses;
  for (int d = 0; d < 4; ++d) {
    Tensor t = Tensor::empty(m.rt, Device::cuda(d), {});
    float v = 0.5f * static_cast<float>(d);
    ops::copy_(ctx, t, host_tensor({v}, {}));
    losses.push_back(t);
  }
  std::vector<std::string> warnings;
  parallel::GatherRecord rec;
  Tensor g = parallel::gather(ctx, losses, Device::cuda(0), &rec,
                              [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "Was asked to gather along dimension 0, but all input tensors were scalars; "
                         "will instead unsqueeze and return a vector.");
  EXPECT_EQ(g.shape(), (Shape{4}));
  EXPECT_EQ(host_values(m.rt, g), (std::vector<float>{0.0f, 0.5f, 1.0f, 1.5f}));
  std::vector<Tensor> back = parallel::gather_backward(ctx, g, rec);
  for (const Tensor& b : back) EXPECT_EQ(b.dim(), 0);  // element [0] of each: 0-dim again
}

TEST(Gather, RejectsHostInputsAndMismatchedShapes) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  Tensor a = Tensor::empty(m.rt, Device::cuda(0), {2, 3});
  Tensor b = Tensor::empty(m.rt, Device::cuda(1), {2, 4});
  try {
    parallel::gather(ctx, {a, Tensor::empty_host({2, 3})}, Device::cuda(0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Gather function not implemented for CPU tensors");
  }
  try {
    parallel::gather(ctx, {a, b}, Device::cuda(0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::StartsWith("Input tensor at index 1 has invalid shape (2, 4)"));
  }
}

// ---- comm --------------------------------------------------------------------------------------

TEST(Comm, TwoBucketRulesAsPyTorchHasTwo) {
  Machine m("workstation-4x3090");
  const size_t MiB = 1 << 20;
  // Byte sizes 4, 4, 4, 1 MiB against a 10 MiB limit.
  std::vector<Tensor> ts;
  for (size_t mib : {4, 4, 4, 1}) ts.push_back(Tensor::empty(m.rt, Device::cuda(0), {static_cast<int64_t>(mib * MiB / 4)}));
  // take_tensors (broadcast): 4+4 < 10, +4 = 12 >= 10 closes {0,1,2}; then {3}.
  EXPECT_EQ(parallel::buckets_closing_at_limit(ts, 10 * MiB), (std::vector<std::vector<size_t>>{{0, 1, 2}, {3}}));
  // _take_tensors (reduce): 4+4+4 > 10 starts a new bucket before tensor 2: {0,1}, {2,3}.
  EXPECT_EQ(parallel::buckets_within_limit(ts, 10 * MiB), (std::vector<std::vector<size_t>>{{0, 1}, {2, 3}}));
  // A tensor larger than the limit is a bucket of its own under both rules.
  std::vector<Tensor> big = {Tensor::empty(m.rt, Device::cuda(0), {static_cast<int64_t>(12 * MiB / 4)}), ts[3]};
  EXPECT_EQ(parallel::buckets_closing_at_limit(big, 10 * MiB), (std::vector<std::vector<size_t>>{{0}, {1}}));
  EXPECT_EQ(parallel::buckets_within_limit(big, 10 * MiB), (std::vector<std::vector<size_t>>{{0}, {1}}));
}

TEST(Comm, BroadcastCoalescedKeepsTheOriginalsOnTheSourceAndViewsElsewhere) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  std::vector<Tensor> ts;
  std::vector<std::vector<float>> vals;
  for (int i = 0; i < 3; ++i) {
    vals.push_back(random_vec(static_cast<size_t>(5 * (i + 1)), 20 + i));
    Tensor t = Tensor::empty(m.rt, Device::cuda(0), {i + 1, 5});
    ops::copy_(ctx, t, host_tensor(vals.back(), {i + 1, 5}));
    ts.push_back(t);
  }
  m.events.clear();
  auto out = parallel::broadcast_coalesced(ctx, ts, {0, 2, 3});
  ASSERT_EQ(out.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(out[0][i].shares_storage_with(ts[i]));
  for (int d = 1; d < 3; ++d) {
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(out[d][i].device(), Device::cuda(d + 1));
      EXPECT_EQ(out[d][i].shape(), ts[i].shape());
      EXPECT_EQ(host_values(m.rt, out[d][i]), vals[i]);
    }
    // One flat buffer per bucket on each device: 30 floats, in one 512-byte block.
    EXPECT_EQ(m.rt.memory_allocated(d + 1), 512u) << d + 1;
  }
  const size_t on_source = m.rt.memory_allocated(0);
  out.clear();  // the replicas' views hold the device buffers; the source's flat was temporary
  EXPECT_EQ(m.rt.memory_allocated(2), 0u);
  EXPECT_EQ(m.rt.memory_allocated(3), 0u);
  EXPECT_EQ(m.rt.memory_allocated(0), on_source);
  EXPECT_EQ(m.count(EventKind::kernel, "cat"), 1);   // flattened once on the source
  EXPECT_EQ(m.count(EventKind::copy, "peer"), 2);    // one copy per other device
  try {
    parallel::broadcast_coalesced(ctx, ts, {1, 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "All tensors must be on devices[0]: 1");
  }
}

TEST(Comm, ReduceAddSumsOntoTheDestinationInPyTorchsOrderAndWords) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  std::vector<Tensor> ins;
  std::vector<float> sum(6, 0.0f);
  for (int d = 0; d < 4; ++d) {
    auto v = random_vec(6, 30 + d);
    Tensor t = Tensor::empty(m.rt, Device::cuda(d), {2, 3});
    ops::copy_(ctx, t, host_tensor(v, {2, 3}));
    ins.push_back(t);
  }
  // root + first other, then += the rest, in input order (root = the input on cuda:2).
  std::vector<std::vector<float>> hv;
  for (auto& t : ins) hv.push_back(host_values(m.rt, t));
  for (size_t i = 0; i < 6; ++i) sum[i] = ((hv[2][i] + hv[0][i]) + hv[1][i]) + hv[3][i];
  Tensor r = parallel::reduce_add(ctx, ins, 2);
  EXPECT_EQ(r.device(), Device::cuda(2));
  EXPECT_EQ(host_values(m.rt, r), sum);  // bit for bit: the same additions in the same order
  try {
    parallel::reduce_add(ctx, {ins[0], ins[1]}, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "reduce_add expects destination to be on the same GPU with one of the tensors");
  }
  Tensor odd = Tensor::empty(m.rt, Device::cuda(1), {3, 2});
  try {
    parallel::reduce_add(ctx, {ins[0], odd}, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "input 1 has invalid size: got 3x2, but expected 2x3");
  }
}

// On the simulator the per-device cats before the reduce are modelled, not made: the sum reads
// each tensor where it lives. Same bits as the whole-buffer sum (root first, then input order),
// and every modelled cat and peer copy still happens on the clock.
TEST(Comm, ReduceAddCoalescedSumsEachTensorWhereItLivesWithTheSameBits) {
  Machine m("workstation-4x3090");
  const std::vector<Shape> shapes = {{3, 5}, {7}, {2, 2}, {11}};
  std::vector<std::vector<Tensor>> inputs(3);
  std::vector<std::vector<std::vector<float>>> values(3);
  for (int d = 0; d < 3; ++d) {
    OpContext ctx{m.rt, d, 0};
    for (size_t j = 0; j < shapes.size(); ++j) {
      Tensor t = Tensor::empty(m.rt, Device::cuda(d), shapes[j]);
      values[d].push_back(random_vec(static_cast<size_t>(t.numel()), 100 + 10 * d + j));
      ops::copy_(ctx, t, host_tensor(values[d].back(), shapes[j]));
      inputs[d].push_back(t);
    }
  }
  m.events.clear();
  OpContext ctx{m.rt, 1, 0};
  // 100-byte buckets (_take_tensors): {3x5, 7} (88 B; 2x2 would pass 100), {2x2, 11} (60 B).
  const std::vector<Tensor> sums = parallel::reduce_add_coalesced(ctx, inputs, 1, 100);
  ASSERT_EQ(sums.size(), shapes.size());
  for (size_t j = 0; j < shapes.size(); ++j) {
    EXPECT_EQ(sums[j].device(), Device::cuda(1));
    EXPECT_EQ(sums[j].shape(), shapes[j]);
    std::vector<float> expected(values[1][j].size());
    for (size_t i = 0; i < expected.size(); ++i)  // root (cuda:1) first, then cuda:0, cuda:2
      expected[i] = (values[1][j][i] + values[0][j][i]) + values[2][j][i];
    EXPECT_EQ(host_values(m.rt, sums[j]), expected) << "tensor " << j;
  }
  // A cat per bucket per device, and two peer copies onto cuda:1 per bucket.
  EXPECT_EQ(m.count(EventKind::kernel, "cat"), 6);
  int peer = 0;
  for (const TraceEvent& e : m.events) peer += e.kind == EventKind::copy && e.device == 1;
  EXPECT_EQ(peer, 4);
}

// ---- replicate -----------------------------------------------------------------------------------

TEST(Replicate, ReplicaZeroSharesTheModulesParametersAndBackwardSums) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  MLP model(m.rt, 0, {5, 4, 3});
  model.init_parameters(ctx, 7);
  auto replicas = parallel::replicate(ctx, model, {0, 1, 2});
  ASSERT_EQ(replicas.size(), 3u);
  auto mp = model.parameters();
  for (size_t r = 0; r < 3; ++r) {
    auto rp = replicas[r]->parameters();
    for (size_t j = 0; j < mp.size(); ++j) {
      EXPECT_EQ(rp[j].value->device(), Device::cuda(static_cast<int>(r)));
      EXPECT_EQ(rp[j].value->shares_storage_with(*mp[j].value), r == 0) << r << " " << mp[j].name;
      EXPECT_EQ(host_values(m.rt, *rp[j].value), host_values(m.rt, *mp[j].value));
    }
  }
  // Gradients 1, 2, 3 on the three replicas: the module's .grad becomes 6 (a SUM, not a mean).
  for (size_t r = 0; r < 3; ++r) {
    OpContext rc{m.rt, static_cast<int>(r), 0};
    for (Parameter& p : replicas[r]->parameters()) {
      *p.grad = Tensor::empty(m.rt, Device::cuda(static_cast<int>(r)), p.value->shape());
      ops::copy_(rc, *p.grad, host_tensor(std::vector<float>(static_cast<size_t>(p.value->numel()), 1.0f + r), p.value->shape()));
    }
  }
  parallel::replicate_backward(ctx, model, replicas);
  for (Parameter& p : model.parameters()) {
    ASSERT_TRUE(p.grad->defined());
    EXPECT_EQ(p.grad->device(), Device::cuda(0));
    for (float g : host_values(m.rt, *p.grad)) EXPECT_EQ(g, 6.0f) << p.name;
  }
  // A second backward accumulates (+=) into the existing .grad, as AccumulateGrad does.
  parallel::replicate_backward(ctx, model, replicas);
  for (float g : host_values(m.rt, *model.parameters()[0].grad)) EXPECT_EQ(g, 12.0f);
}

// ---- parallel_apply -------------------------------------------------------------------------------

namespace {

// Runs parallel_apply over n replicas whose workers each wait until all n have started (run one
// after another, they never would) and returns the thread each ran on; met is false if they
// did not all meet within 20 s. inner (if set) runs inside replica 1 before it waits.
std::vector<std::thread::id> meet_in_parallel_apply(size_t n, bool& met,
                                                    const std::function<void()>& inner = {}) {
  std::mutex mu;
  std::condition_variable cv;
  size_t started = 0;
  met = true;
  std::vector<std::thread::id> ids(n);
  std::vector<int> devices(n);
  for (size_t i = 0; i < n; ++i) devices[i] = static_cast<int>(i);
  parallel::parallel_apply(devices, [&](size_t i) {
    if (i == 1 && inner) inner();
    std::unique_lock<std::mutex> lock(mu);
    ids[i] = std::this_thread::get_id();
    ++started;
    cv.notify_all();
    if (!cv.wait_for(lock, std::chrono::seconds(20), [&] { return started == n; })) met = false;
  });
  return ids;
}

}  // namespace

TEST(ParallelApply, RunsTheReplicasConcurrentlyOneThreadEach) {
  bool met = false;
  const std::vector<std::thread::id> ids = meet_in_parallel_apply(4, met);
  EXPECT_TRUE(met);
  EXPECT_EQ(ids[0], std::this_thread::get_id());  // replica 0 runs on the caller's thread
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_NE(ids[i], std::this_thread::get_id());
    for (size_t j = 0; j < i; ++j) EXPECT_NE(ids[i], ids[j]);
  }
  // One replica runs in the caller's thread.
  std::thread::id one;
  parallel::parallel_apply({3}, [&](size_t) { one = std::this_thread::get_id(); });
  EXPECT_EQ(one, std::this_thread::get_id());
}

TEST(ParallelApply, KeepsItsWorkerThreadsBetweenCallsAndStartsMoreWhenMoreReplicasCome) {
  bool met = false;
  const std::vector<std::thread::id> first = meet_in_parallel_apply(3, met);
  ASSERT_TRUE(met);
  const std::vector<std::thread::id> again = meet_in_parallel_apply(3, met);
  ASSERT_TRUE(met);
  EXPECT_EQ(std::set<std::thread::id>(first.begin() + 1, first.end()),
            std::set<std::thread::id>(again.begin() + 1, again.end()));
  // Six replicas need five pool threads: the two already there and three new ones, all at once.
  const std::vector<std::thread::id> six = meet_in_parallel_apply(6, met);
  EXPECT_TRUE(met);
  EXPECT_EQ(std::set<std::thread::id>(six.begin(), six.end()).size(), 6u);
  // Fewer replicas than pool threads: the idle ones stay out of it.
  const std::vector<std::thread::id> two = meet_in_parallel_apply(2, met);
  EXPECT_TRUE(met);
  EXPECT_NE(two[0], two[1]);
}

TEST(ParallelApply, WithFewerThreadsThanReplicasRunsEachReplicaOnceAndLabelsTheLowestFailure) {
  const std::vector<int> devices{0, 1, 2, 3, 4, 5, 6, 7};
  std::mutex mu;
  std::condition_variable both_in;
  std::map<size_t, int> runs;
  std::set<std::thread::id> threads;
  parallel::parallel_apply(devices, [&](size_t i) {
    std::unique_lock<std::mutex> lock(mu);
    ++runs[i];
    threads.insert(std::this_thread::get_id());
    both_in.notify_all();
    // A replica waits (10 s at most) until a second thread has taken one: work this small could
    // otherwise all go to whichever thread starts first.
    both_in.wait_for(lock, std::chrono::seconds(10), [&] { return threads.size() >= 2; });
  }, /*max_threads=*/2);
  ASSERT_EQ(runs.size(), devices.size());
  for (const auto& [i, n] : runs) EXPECT_EQ(n, 1) << "replica " << i;
  EXPECT_EQ(threads.size(), 2u);
  EXPECT_TRUE(threads.count(std::this_thread::get_id()));  // the caller takes replicas too
  // Every replica still runs to the end; the lowest failing one is reported, with its device.
  std::vector<int> ran(devices.size(), 0);
  try {
    parallel::parallel_apply(devices, [&](size_t i) {
      ran[i] = 1;
      if (i == 3 || i == 6) throw std::runtime_error("boom " + std::to_string(i));
    }, 3);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("in replica 3 on device 3"));
    EXPECT_THAT(e.message(), ::testing::HasSubstr("boom 3"));
  }
  EXPECT_EQ(ran, std::vector<int>(devices.size(), 1));
}

TEST(ParallelApply, ANestedCallGetsThreadsOfItsOwnInsteadOfWaitingForTheBusyPool) {
  bool outer_met = false, inner_met = false;
  std::vector<std::thread::id> inner;
  meet_in_parallel_apply(3, outer_met, [&] { inner = meet_in_parallel_apply(4, inner_met); });
  EXPECT_TRUE(outer_met);
  EXPECT_TRUE(inner_met);
  EXPECT_EQ(std::set<std::thread::id>(inner.begin(), inner.end()).size(), 4u);
}

TEST(ParallelApply, ReportsTheFirstFailureByReplicaAndDeviceKeepingItsType) {
  std::vector<int> ran(4, 0);
  try {
    parallel::parallel_apply({0, 2, 5, 7}, [&](size_t i) {
      ran[i] = 1;
      if (i == 2) throw Error("boom");
      if (i == 3) throw Error("later");
    });
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Caught RuntimeError in replica 2 on device 5. Original error: boom");
    EXPECT_EQ(e.device(), 5);
  }
  EXPECT_EQ(ran, (std::vector<int>{1, 1, 1, 1}));  // every worker ran to its end
  EXPECT_THROW(parallel::parallel_apply({0, 1}, [](size_t i) {
                 if (i == 1) throw OutOfMemoryError("CUDA out of memory.");
               }),
               OutOfMemoryError);
}

TEST(ParallelApply, ModuleFormRunsEachReplicaOnItsDeviceAndLabelsAnOom) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  MLP model(m.rt, 0, {8, 1000000});  // 32 MB of parameters; 10000 rows of output need 40 GB
  model.init_parameters(ctx, 1);
  auto replicas = parallel::replicate(ctx, model, {0, 1});
  auto input = [&](int device, int64_t rows) {
    Tensor t = Tensor::empty(m.rt, Device::cuda(device), {rows, 8});
    OpContext c{m.rt, device, 0};
    ops::zero(c, t);
    return t;
  };
  try {
    parallel::parallel_apply(m.rt, replicas, {input(0, 1)}, {0, 1});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "The number of modules 2 is not equal to the number of inputs 1");
  }
  auto outs = parallel::parallel_apply(m.rt, replicas, {input(0, 2), input(1, 1)}, {0, 1});
  EXPECT_EQ(outs[0].device(), Device::cuda(0));
  EXPECT_EQ(outs[1].device(), Device::cuda(1));
  EXPECT_EQ(outs[1].shape(), (Shape{1, 1000000}));
  try {
    parallel::parallel_apply(m.rt, replicas, {input(0, 1), input(1, 10000)}, {0, 1});
    FAIL();
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(), ::testing::StartsWith("Caught OutOfMemoryError in replica 1 on device 1. "
                                                "Original error: CUDA out of memory. Tried to allocate"));
  }
}

// ---- DataParallel: construction ---------------------------------------------------------------------

TEST(DataParallelCtor, ErrorsInPyTorchsWords) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  MLP model(m.rt, 0, {4, 2});
  try {
    DataParallel dp(m.rt, model, std::vector<int>{0, 4});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Invalid device id");
  }
  try {
    DataParallel dp(m.rt, model, std::vector<int>{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "list index out of range");
  }
  MLP on_one(m.rt, 1, {4, 2});
  DataParallel dp(m.rt, on_one, std::vector<int>{0, 1});  // not moved with two devices
  Tensor x = Tensor::empty_host({4, 4});
  try {
    dp.forward(ctx, x);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "module must have its parameters and buffers on device cuda:0 (device_ids[0]) "
                           "but found one of them on device: cuda:1");
  }
}

TEST(DataParallelCtor, DefaultsToEveryVisibleDeviceAndOutputOnTheFirst) {
  Machine m("workstation-4x3090");
  MLP model(m.rt, 0, {4, 2});
  DataParallel dp(m.rt, model);
  EXPECT_EQ(dp.device_ids(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(dp.output_device(), 0);
  DataParallel dp2(m.rt, model, std::vector<int>{2, 3}, 1);
  EXPECT_EQ(dp2.output_device(), 1);
}

TEST(DataParallelCtor, ImbalanceWarningOnTheMixedPairOnlyOnce) {
  std::vector<std::string> warnings;
  auto collect = [&](const std::string& w) { warnings.push_back(w); };
  {
    Machine m("mixed-3090-3060");
    MLP model(m.rt, 0, {4, 2});
    DataParallel dp(m.rt, model, std::nullopt, std::nullopt, collect);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_EQ(warnings[0],
              "\n    There is an imbalance between your GPUs. You may want to exclude GPU 0 which\n"
              "    has less than 75% of the memory or cores of GPU 1. You can do so by setting\n"
              "    the device_ids argument to DataParallel, or by setting the CUDA_VISIBLE_DEVICES\n"
              "    environment variable.");
    // Reversed: the smaller GPU is still named by its id.
    DataParallel rev(m.rt, model, std::vector<int>{1, 0}, std::nullopt, collect);
    ASSERT_EQ(warnings.size(), 2u);
    EXPECT_NE(warnings[1].find("exclude GPU 0 which"), std::string::npos);  // the RTX 3060 (PCI-first)
  }
  warnings.clear();
  Machine same("workstation-4x3090");
  MLP model(same.rt, 0, {4, 2});
  DataParallel dp(same.rt, model, std::nullopt, std::nullopt, collect);
  EXPECT_TRUE(warnings.empty());
}

TEST(DataParallelCtor, OneDeviceMovesTheModuleAndTakesTheShortcut) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  MLP model(m.rt, 2, {4, 3});
  OpContext on2{m.rt, 2, 0};
  model.init_parameters(on2, 3);
  DataParallel dp(m.rt, model, std::vector<int>{1});
  EXPECT_EQ(model.device(), 1);  // moved by the constructor
  m.events.clear();
  Tensor out = dp.forward(ctx, host_tensor(random_vec(8, 4), {2, 4}));
  EXPECT_EQ(out.device(), Device::cuda(1));
  EXPECT_EQ(m.count(EventKind::phase, "replicate"), 0);  // no replicate, no gather
  EXPECT_EQ(m.count(EventKind::phase, "gather"), 0);
  EXPECT_EQ(m.count(EventKind::copy, "peer"), 0);
  EXPECT_EQ(m.count(EventKind::copy, "h2d"), 1);  // the input still went through scatter
}

TEST(DataParallelCtor, WithNoDeviceTheModuleRunsAsItIs) {
  // CUDA_VISIBLE_DEVICES="" hides every GPU: DataParallel keeps the module (on the host) and calls
  // it directly: no scatter, no replicate, no gather, no modelled time.
  TraceBus bus;
  Runtime rt(make_backend("sim", load_topology("workstation-4x3090"), &bus, Environment{{kCudaVisibleDevices, ""}}), bus);
  ASSERT_EQ(rt.device_count(), 0);
  OpContext host{rt, -1, 0};
  MLP model(rt, -1, {4, 3, 2});
  model.init_parameters(host, 5);
  std::vector<std::string> warnings;
  DataParallel dp(rt, model, std::nullopt, std::nullopt, [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_TRUE(dp.device_ids().empty());
  int events = 0;
  const int id = bus.subscribe([&](const TraceEvent&) { ++events; });
  Tensor x = host_tensor(random_vec(8, 9), {2, 4});
  Tensor out = dp.forward(host, x);
  bus.unsubscribe(id);
  EXPECT_EQ(out.device(), Device::cpu());
  EXPECT_EQ(out.shape(), (Shape{2, 2}));
  Tensor direct = model.forward(host, x);
  EXPECT_EQ(std::vector<float>(out.data<float>(), out.data<float>() + 4),
            std::vector<float>(direct.data<float>(), direct.data<float>() + 4));
  EXPECT_EQ(events, 0);
  EXPECT_TRUE(warnings.empty());
  dp.backward(host, host_tensor({1, 1, 1, 1}, {2, 2}));  // the module's own backward
  EXPECT_TRUE(model.parameters()[0].grad->defined());
}

// ---- DataParallel: the trace --------------------------------------------------------------------------

TEST(DataParallelTrace, EveryPhaseIsASpanOnEveryDeviceAndTracksNest) {
  Machine m("workstation-4x3090");
  OpContext ctx{m.rt, 0, 0};
  MLP model(m.rt, 0, {784, 64, 10});
  model.init_parameters(ctx, 1);
  DataParallel dp(m.rt, model);
  m.events.clear();
  Tensor out = dp.forward(ctx, host_tensor(random_vec(10 * 784, 3), {10, 784}));
  Tensor grad = Tensor::empty(m.rt, out.device(), out.shape());
  ops::zero(ctx, grad);
  dp.backward(ctx, grad);
  std::map<int, std::vector<std::string>> phases;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  for (const TraceEvent& e : m.events) {
    if (e.kind == EventKind::phase) phases[e.device].push_back(e.name);
    tracks[{e.device, e.kind == EventKind::phase ? 1000 : e.stream}].emplace_back(e.start_s, e.start_s + e.dur_s);
  }
  const std::vector<std::string> all = {"scatter", "replicate", "forward", "gather", "gather_backward", "backward", "reduce"};
  EXPECT_EQ(phases[0], all);  // cuda:0 takes part in every phase
  for (int d = 1; d < 4; ++d)
    EXPECT_EQ(phases[d], all) << "cuda:" << d;  // 3,3,3,1 rows: every device has a replica
  for (auto& [track, spans] : tracks) {  // one track never has two overlapping events
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i)
      EXPECT_LE(spans[i - 1].second, spans[i].first + 1e-12) << "device " << track.first << " track " << track.second;
  }
  // Parameters, summed gradients: only on cuda:0 after the step; the replicas are gone.
  for (int d = 1; d < 4; ++d) EXPECT_EQ(m.rt.memory_allocated(d), 0u) << d;
  EXPECT_GT(m.rt.max_memory_allocated(0), m.rt.max_memory_allocated(1));
}

// ---- the loss-weighting trap ----------------------------------------------------------------------------

TEST(LossTrap, MeanOfChunkMeansIsNotTheBatchMeanWithUnequalChunks) {
  Machine m("workstation-4x3090");
  LossTrapResult r = run_loss_trap(m.rt, {}, 10, 0, nullptr);
  EXPECT_EQ(r.chunks, (std::vector<int64_t>{3, 3, 3, 1}));
  ASSERT_EQ(r.replica_losses.size(), 4u);
  EXPECT_GT(std::fabs(r.mean_of_means - r.batch_mean), 1e-4);  // the trap
  EXPECT_NEAR(r.weighted_mean, r.batch_mean, 1e-5);            // the fix
  EXPECT_GT(r.grad_relative_difference, 0.05);
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_EQ(r.warnings.back(), "Was asked to gather along dimension 0, but all input tensors were "
                               "scalars; will instead unsqueeze and return a vector.");
  LossTrapResult equal = run_loss_trap(m.rt, {}, 12, 0, nullptr);  // 3,3,3,3
  EXPECT_NEAR(equal.mean_of_means, equal.batch_mean, 1e-6);
  EXPECT_LT(equal.grad_relative_difference, 1e-5);
}

// gathered.mean() is ATen's float32 CUDA mean (MeanOps: the float sum times float(1)/n), not a
// double mean: over these seeds at least one differs from the double mean rounded to float.
TEST(LossTrap, MeanOfMeansIsAFloat32MeanAsAtenComputesIt) {
  Machine m("workstation-4x3090");
  int differs_from_double = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    const LossTrapResult r = run_loss_trap(m.rt, {0, 1, 2}, 7, seed, nullptr);  // 3,3,1
    ASSERT_EQ(r.replica_losses.size(), 3u);
    const float sum = (r.replica_losses[0] + r.replica_losses[1]) + r.replica_losses[2];
    EXPECT_EQ(r.mean_of_means, sum * (1.0f / 3.0f)) << "seed " << seed;
    double d = 0;
    for (float l : r.replica_losses) d += static_cast<double>(l) / 3.0;
    differs_from_double += static_cast<float>(d) != r.mean_of_means;
  }
  EXPECT_GT(differs_from_double, 0);
}

// DataParallel with one device id calls the module itself: its 0-dim loss, nothing gathered, no
// warning, and .mean() of it is the batch mean (PyTorch's data_parallel.py forward).
TEST(LossTrap, OneDeviceIdReturnsTheModulesScalarLoss) {
  Machine m("workstation-4x3090");
  const LossTrapResult r = run_loss_trap(m.rt, {2}, 5, 0, nullptr);
  EXPECT_TRUE(r.scalar_loss);
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.chunks, (std::vector<int64_t>{5}));
  ASSERT_EQ(r.replica_losses.size(), 1u);
  EXPECT_FLOAT_EQ(r.mean_of_means, static_cast<float>(r.batch_mean));
  EXPECT_LT(r.grad_relative_difference, 1e-6);
  EXPECT_FALSE(run_loss_trap(m.rt, {0, 1}, 5, 0, nullptr).scalar_loss);
}

// ---- DataParallel == one device ---------------------------------------------------------------------

// Trains the reference MLP (784-512-512-10, SGD lr 0.1 momentum 0.9) for 5 steps on fixed batches
// of B rows, with DataParallel over `k` devices of a DGX H100 (k = 1: no DataParallel at all), and
// returns every parameter.
std::vector<std::vector<float>> train_five_steps(int k, int64_t B, std::vector<int64_t>* chunks = nullptr) {
  Machine m("dgx-h100");
  OpContext ctx{m.rt, 0, 0};
  MLP model(m.rt, 0, {784, 512, 512, 10});
  model.init_parameters(ctx, 11);
  SGD opt(model.parameters(), 0.1f, 0.9f);
  CrossEntropyLoss ce;
  std::vector<int> ids;
  for (int i = 0; i < k; ++i) ids.push_back(i);
  std::unique_ptr<DataParallel> dp;
  if (k > 1) dp = std::make_unique<DataParallel>(m.rt, model, ids);
  for (int step = 0; step < 5; ++step) {
    Tensor x = host_tensor(random_vec(static_cast<size_t>(B * 784), 100 + step), {B, 784});
    std::vector<int32_t> labels(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + step) % 10);
    Tensor y = Tensor::empty(m.rt, Device::cuda(0), {B}, DType::i32);
    ops::copy_to_device(ctx, y, labels.data());
    Tensor logits;
    if (dp) {
      logits = dp->forward(ctx, x);
      if (chunks) *chunks = dp->last_chunks();
    } else {
      Tensor xd = Tensor::empty(m.rt, Device::cuda(0), x.shape());
      ops::copy_(ctx, xd, x);
      logits = model.forward(ctx, xd);
    }
    ce.forward(ctx, logits, y);  // the loss on the gathered output: the whole batch's mean
    opt.zero_grad(ctx);
    Tensor dlogits = ce.backward(ctx);
    if (dp) dp->backward(ctx, dlogits);
    else model.backward(ctx, dlogits);
    opt.step(ctx);
  }
  std::vector<std::vector<float>> out;
  for (Parameter& p : model.parameters()) out.push_back(model.parameter_values(ctx, p.name));
  return out;
}

// The fp32 reassociation bound. A gradient element is a sum over the batch; DataParallel sums each
// chunk's rows (a GEMM per replica) and then adds the k partial sums, one device sums all B rows
// in one GEMM. Both are the exact sum up to rounding of about (number of additions) * 2^-24 of
// the sum of |terms|; over 5 momentum steps with lr 0.1 the weights move by at most a few 1e-7.
// Bound: |w_dp - w_1| <= 1e-6 + 1e-5 * |w_1| for every weight (measured worst: see the message).
constexpr float kAtol = 1e-6f, kRtol = 1e-5f;

void expect_same_weights(int k, int64_t B) {
  std::vector<int64_t> chunks;
  auto one = train_five_steps(1, B);
  auto dp = train_five_steps(k, B, &chunks);
  EXPECT_EQ(chunks, chunk_sizes(B, k));
  float worst = 0;
  for (size_t p = 0; p < one.size(); ++p)
    for (size_t i = 0; i < one[p].size(); ++i) {
      const float excess = std::fabs(dp[p][i] - one[p][i]) - kRtol * std::fabs(one[p][i]);
      worst = std::max(worst, std::fabs(dp[p][i] - one[p][i]));
      ASSERT_LE(excess, kAtol) << "k=" << k << " B=" << B << " param " << p << "[" << i << "]";
    }
  ::testing::Test::RecordProperty("worst_abs_diff_k" + std::to_string(k) + "_B" + std::to_string(B), std::to_string(worst));
  std::printf("[ equivalence ] k=%d B=%lld chunks=%zu: max |w_dp - w_1| after 5 steps = %.3g\n", k,
              static_cast<long long>(B), chunks.size(), worst);
}

TEST(DataParallelEquivalence, TwoDevices) { expect_same_weights(2, 64); }
TEST(DataParallelEquivalence, ThreeDevicesUnequalChunks) { expect_same_weights(3, 64); }  // 22,22,20
TEST(DataParallelEquivalence, FourDevices) { expect_same_weights(4, 64); }
TEST(DataParallelEquivalence, EightDevices) { expect_same_weights(8, 64); }
TEST(DataParallelEquivalence, TenRowsOnFourDevices) { expect_same_weights(4, 10); }  // 3,3,3,1
TEST(DataParallelEquivalence, FewerRowsThanDevices) { expect_same_weights(8, 5); }   // 5 replicas of 1

}  // namespace
}  // namespace furnace
