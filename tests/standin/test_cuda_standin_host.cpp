// The cuda backend's host code in-process, over the stand-in CUDA runtime: this executable re-runs
// itself with the stand-in LD_PRELOADed (two stand-in GPUs of 1 GiB, 300 MiB of it per context),
// then checks the backend's enumeration and properties, the caching allocator over cudaMalloc
// (PyTorch's statistics, out of memory and recovery), mem_get_info with the context counted, and
// that copies, memset and peer copies reach the runtime with the right bytes. The stand-in's
// "device" memory is host memory: these are host-path results, never GPU results.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/event_trace.h"  // defines: EventTrace
#include "furnace/backend.h"  // defines: make_backend, discover_hardware_devices
#include "furnace/error.h"
#include "furnace/topology.h"
#include "furnace/ops.h"
#include "furnace/runtime.h"

namespace furnace {
namespace {

bool under_standin() { return dlsym(RTLD_DEFAULT, "furnace_cuda_standin") != nullptr; }

// One of the stand-in's (or the runtime's) functions, looked up by name; nullptr where it is not.
template <class F>
F standin_function(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

class StandinHost : public ::testing::Test {
 protected:
  void SetUp() override {
    // main() re-runs this executable under the stand-in; a failure to do so must not pass.
    ASSERT_TRUE(under_standin()) << "the stand-in runtime is not loaded (LD_PRELOAD failed?)";
  }
};

TEST_F(StandinHost, TheBackendEnumeratesTheRuntimesDevicesWithTheirProperties) {
  const cuda::DriverStatus s = cuda::runtime_status();
  EXPECT_EQ(s.kind, cuda::DriverStatus::Kind::ok);
  EXPECT_EQ(s.device_count, 2);
  EXPECT_EQ(cuda::device_count(), 2);
  auto backend = cuda::make_backend(nullptr, {1, 0});
  ASSERT_EQ(backend->device_count(), 2);  // issue 14: the backend saw 0 here
  const GpuSpec& g = backend->device_spec(1);
  EXPECT_EQ(g.name, "NVIDIA H200 (stand-in)");
  EXPECT_EQ(g.uuid, "GPU-57a4d0e0-0000-4000-8000-000000000001");
  EXPECT_EQ(g.pci_bus_id, "00000000:19:00.0");
  EXPECT_EQ(g.memory_bytes, 1024ull << 20);
  EXPECT_EQ(g.sm_count, 132);
  EXPECT_EQ(g.compute_capability_major, 9);
  EXPECT_EQ(backend->physical_index(0), 1);
  EXPECT_EQ(backend->describe_devices(),
            "this process sees 2 CUDA devices: cuda:0 = GPU 1, cuda:1 = GPU 0 (CUDA_VISIBLE_DEVICES not set)");
}

// The registry's road (what `--backend cuda` takes): the runtime's devices, each matched by UUID
// to NVML's GPU (the stand-in answers NVML too).
TEST_F(StandinHost, TheRegistryBuildsTheCudaBackendWithNvmlsNumbers) {
  ASSERT_TRUE(cuda_backend_built());
  auto backend = make_backend("cuda", load_topology("laptop-4060"), nullptr);
  ASSERT_EQ(backend->device_count(), 2);
  EXPECT_STREQ(backend->name(), "cuda");
  EXPECT_EQ(backend->physical_index(0), 0);
  EXPECT_EQ(backend->physical_index(1), 1);
  const HardwareDevices h = discover_hardware_devices();
  EXPECT_TRUE(h.nvml_available) << h.nvml_error;
  EXPECT_TRUE(h.cuda_available) << h.cuda_error;
  EXPECT_EQ(h.logical_to_physical, (std::vector<int>{0, 1}));
}

TEST_F(StandinHost, CopiesAndMemsetReachTheRuntimeWithTheRightBytes) {
  TraceBus bus;
  Runtime rt(cuda::make_backend(&bus), bus);
  OpContext ctx{rt, 0, 0};
  std::vector<float> src(4096), dst(4096, 0.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) - 7.5f;
  Tensor t = Tensor::empty(rt, Device::cuda(0), {4096});
  EXPECT_EQ(rt.memory_allocated(0), 16384u);
  EXPECT_EQ(rt.memory_reserved(0), 2u << 20);
  ops::copy_to_device(ctx, t, src.data());
  ops::copy_to_host(ctx, dst.data(), t);
  EXPECT_EQ(src, dst);
  // Pinned host-to-device (the copy stream and its events), then a peer copy to cuda:1.
  rt.backend().copy(CopyKind::h2d, t.raw(), 0, src.data() + 1, -1, 4095 * sizeof(float), 0, /*pinned=*/true);
  Tensor u = Tensor::empty(rt, Device::cuda(1), {4096});
  rt.backend().copy(CopyKind::peer, u.raw(), 1, t.raw(), 0, 4096 * sizeof(float), 0, false);
  OpContext ctx1{rt, 1, 0};
  ops::copy_to_host(ctx1, dst.data(), u);
  for (size_t i = 0; i + 1 < src.size(); ++i) ASSERT_EQ(dst[i], src[i + 1]) << i;
  rt.backend().memset(1, u.raw(), 0, 4096 * sizeof(float), 0);
  ops::copy_to_host(ctx1, dst.data(), u);
  EXPECT_EQ(dst, std::vector<float>(4096, 0.0f));
}

#ifdef FURNACE_WITH_NCCL

// The stand-in NCCL's mode and FURNACE_NCCL_TIMEOUT_S back as they were, also when a test fails
// half-way.
struct NcclRestore {
  void (*set_nccl)(const char*);
  ~NcclRestore() {
    set_nccl("ok");
    ::unsetenv("FURNACE_NCCL_TIMEOUT_S");
  }
};

// DataParallel's NCCL path (NcclComms: ncclCommInitAll, one thread's group of every rank, then a
// wait on the ranks' streams) over the stand-in's NCCL: the bytes move, a collective whose peers
// never come ends after FURNACE_NCCL_TIMEOUT_S in one line with its communicators aborted (and the
// next collective makes new ones), and an error ncclCommGetAsyncError reports is one line too.
TEST_F(StandinHost, DataParallelsNcclCollectivesMoveTheBytesAndTheirFailuresAreOneLine) {
  const auto set_nccl = standin_function<void (*)(const char*)>("furnace_standin_set_nccl");
  const auto aborts = standin_function<long (*)()>("furnace_standin_nccl_aborts");
  const auto collectives = standin_function<long (*)()>("furnace_standin_nccl_collectives");
  ASSERT_TRUE(set_nccl && aborts && collectives) << "the stand-in library was built without its NCCL";
  NcclRestore restore{set_nccl};
  set_nccl("ok");
  TraceBus bus;
  Runtime rt(cuda::make_backend(&bus), bus);
  Backend& backend = rt.backend();
  ASSERT_TRUE(backend.collectives_available({0, 1}, DType::f32));
  constexpr size_t n = 3000;
  std::vector<float> a(n), b(n), out(n);
  for (size_t i = 0; i < n; ++i) a[i] = 0.5f * static_cast<float>(i), b[i] = 1.0f - static_cast<float>(i) / 3.0f;
  Tensor ta = Tensor::empty(rt, Device::cuda(0), {static_cast<int64_t>(n)});
  Tensor tb = Tensor::empty(rt, Device::cuda(1), {static_cast<int64_t>(n)});
  OpContext ctx0{rt, 0, 0}, ctx1{rt, 1, 0};
  ops::copy_to_device(ctx0, ta, a.data());
  ops::copy_to_device(ctx1, tb, b.data());
  const long before = collectives();
  // reduce: cuda:0 = a + b (float32 sums of two terms: exact in any order); then broadcast to cuda:1.
  ASSERT_TRUE(backend.reduce_sum(ta.raw(), {ta.raw(), tb.raw()}, {0, 1}, 0, n, DType::f32, 0));
  ops::copy_to_host(ctx0, out.data(), ta);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
  ASSERT_TRUE(backend.broadcast({ta.raw(), tb.raw()}, {0, 1}, 0, n, DType::f32, 0));
  ops::copy_to_host(ctx1, out.data(), tb);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;
  EXPECT_EQ(collectives() - before, 2);

  // Peers that never come: the wait gives up after the timeout and aborts both communicators.
  set_nccl("stall");
  ::setenv("FURNACE_NCCL_TIMEOUT_S", "0.3", 1);  // read at each wait; no backend thread reads it now
  const long aborted = aborts();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    backend.broadcast({ta.raw(), tb.raw()}, {0, 1}, 0, n, DType::f32, 0);
    ADD_FAILURE() << "a broadcast whose streams never complete returned";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "NCCL error: ncclBroadcast over 2 GPUs did not finish within 0.3 s "
                           "(FURNACE_NCCL_TIMEOUT_S); its communicators were aborted");
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(aborts() - aborted, 2);
  ::unsetenv("FURNACE_NCCL_TIMEOUT_S");
  // The next collective makes new communicators and completes.
  set_nccl("ok");
  ops::copy_to_device(ctx1, tb, b.data());
  ASSERT_TRUE(backend.broadcast({ta.raw(), tb.raw()}, {0, 1}, 0, n, DType::f32, 0));
  ops::copy_to_host(ctx1, out.data(), tb);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]) << i;

  // An asynchronous error (a peer died): one line naming the collective, rank and device.
  set_nccl("error");
  try {
    backend.reduce_sum(ta.raw(), {ta.raw(), tb.raw()}, {0, 1}, 0, n, DType::f32, 0);
    ADD_FAILURE() << "a reduce whose communicator reported an error returned";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "NCCL error: remote process exited or there was a network error (ncclReduce on "
                           "rank 0, device 0, reported by ncclCommGetAsyncError)");
  }
  EXPECT_EQ(aborts() - aborted, 4);  // the pair made after the timeout, aborted too
}

// DDP's communicator between rank threads (NcclRankComm: a non-blocking ncclCommInitRankConfig,
// each collective preceded by an all-reduce of every rank's header, a watchdog thread), two ranks
// on the two stand-in GPUs. `body` runs on each rank's thread with its communicator; what a rank
// threw (construction included) comes back by rank. Only the first `joining` ranks start.
template <class Body>
std::vector<std::string> run_ranks(Backend& backend, std::chrono::milliseconds timeout, int joining, Body body) {
  const std::vector<char> id = backend.comm_unique_id();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < joining; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<RankCommunicator> comm = backend.make_rank_communicator(id, r, 2, r, timeout);
        body(r, *comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

TEST_F(StandinHost, DdpsNcclCommunicatorAllReducesBetweenRankThreadsAndEachFailureIsItsLine) {
  const auto set_nccl = standin_function<void (*)(const char*)>("furnace_standin_set_nccl");
  ASSERT_TRUE(set_nccl) << "the stand-in library was built without its NCCL";
  NcclRestore restore{set_nccl};
  set_nccl("ok");
  TraceBus bus;
  Runtime rt(cuda::make_backend(&bus), bus);
  Backend& backend = rt.backend();
  using std::chrono::milliseconds;
  constexpr size_t n = 1000;
  std::vector<Tensor> grads = {Tensor::empty(rt, Device::cuda(0), {static_cast<int64_t>(n)}),
                               Tensor::empty(rt, Device::cuda(1), {static_cast<int64_t>(n)})};
  const auto value = [](int rank, size_t i) { return static_cast<float>(i) * (rank == 0 ? 0.25f : -1.0f) + 3.0f * rank; };
  for (int r = 0; r < 2; ++r) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = value(r, i);
    OpContext ctx{rt, r, 0};
    ops::copy_to_device(ctx, grads[static_cast<size_t>(r)], v.data());
  }
  // Every rank's gradient summed into every rank's (two terms: exact), then rank 1's broadcast.
  std::vector<std::vector<float>> seen(2, std::vector<float>(n)), sent(2, std::vector<float>(n));
  std::vector<std::string> errors = run_ranks(backend, milliseconds(5000), 2, [&](int r, RankCommunicator& comm) {
    float* data = static_cast<float*>(grads[static_cast<size_t>(r)].raw());
    // Work.wait(): the compute stream waits for the all-reduce, the host does not; the copy to the
    // host queued after it on that stream sees the sum.
    comm.stream_wait(comm.all_reduce_sum_f32(data, n, 0), 0);
    OpContext ctx{rt, r, 0};
    ops::copy_to_host(ctx, seen[static_cast<size_t>(r)].data(), grads[static_cast<size_t>(r)]);
    if (r == 0) backend.memset(0, data, 0, n * sizeof(float), 0);  // what the broadcast must overwrite
    comm.broadcast_f32(data, n, /*root=*/1, 0);
    comm.barrier();
    ops::copy_to_host(ctx, sent[static_cast<size_t>(r)].data(), grads[static_cast<size_t>(r)]);
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(seen[static_cast<size_t>(r)][i], value(0, i) + value(1, i)) << "rank " << r << ", element " << i;
      ASSERT_EQ(sent[static_cast<size_t>(r)][i], value(0, i) + value(1, i)) << "rank " << r << ", element " << i;
    }

  // Ranks calling different collectives: the header all-reduce shows it, both ranks abort with the
  // line that says who called what (NCCL itself would hang in the data all-reduce).
  const std::string mismatch =
      "ProcessGroup (nccl): every rank must call the same collective: rank 0 called all_reduce of 10 f32 "
      "elements, rank 1 called all_reduce of 20 f32 elements; the communicator was aborted";
  errors = run_ranks(backend, milliseconds(5000), 2, [&](int r, RankCommunicator& comm) {
    comm.all_reduce_sum_f32(static_cast<float*>(grads[static_cast<size_t>(r)].raw()), r == 0 ? 10 : 20, 0);
    comm.barrier();
  });
  EXPECT_EQ(errors, std::vector<std::string>(2, mismatch));

  // A rank that never joins: the other gives up after the timeout.
  const auto t0 = std::chrono::steady_clock::now();
  errors = run_ranks(backend, milliseconds(300), 1, [](int, RankCommunicator&) {});
  EXPECT_EQ(errors[0], "ProcessGroup (nccl): rank 0 of 2 on cuda:0: ncclCommInitRank did not complete within 300 ms: "
                       "not every rank arrived (a rank that failed to start, or a different WORLD_SIZE)");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));

  // A rank that stops calling collectives: the other's watchdog aborts after --dist-timeout (long
  // enough for both to join on a loaded machine: the join has the same timeout).
  errors = run_ranks(backend, milliseconds(2000), 2, [&](int r, RankCommunicator& comm) {
    if (r == 1) return;  // leaves without calling
    comm.all_reduce_sum_f32(static_cast<float*>(grads[0].raw()), n, 0);
    comm.barrier();
  });
  EXPECT_EQ(errors[0], "ProcessGroup (nccl): rank 0: a collective did not end within 2000 ms (--dist-timeout): another "
                       "rank stopped, hangs or called a different collective; its own output says why. The "
                       "communicator was aborted");
  EXPECT_EQ(errors[1], "");

  // A peer's failure, as ncclCommGetAsyncError reports it.
  set_nccl("error");
  errors = run_ranks(backend, milliseconds(5000), 2, [&](int r, RankCommunicator& comm) {
    comm.all_reduce_sum_f32(static_cast<float*>(grads[static_cast<size_t>(r)].raw()), n, 0);
    comm.barrier();
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(errors[static_cast<size_t>(r)],
              "ProcessGroup (nccl): rank " + std::to_string(r) + " on cuda:" + std::to_string(r) +
                  ": NCCL error: remote process exited or there was a network error (reported by "
                  "ncclCommGetAsyncError: a peer failed or its connection broke)");
}
#endif

// Work still in flight: the stand-in answers the first two queries of each recorded event and each
// stream given work with cudaErrorNotReady, which the runtime also leaves as the thread's last
// error. The backend polls in two places here, the pinned pool (is the copy that read a block
// done?) and the trace (have a span's events completed?); each must clear that error, as PyTorch's
// CUDAEvent::query does, or the next launch check (cudaGetLastError after a kernel, CUB's
// cudaPeekAtLastError) would fail with "device not ready".
TEST_F(StandinHost, PollingWorkStillInFlightLeavesNoErrorForTheNextLaunchCheck) {
  using SetNotReady = void (*)(int);
  const auto set_not_ready = standin_function<SetNotReady>("furnace_standin_set_not_ready");
  const auto not_ready_answers = standin_function<long (*)()>("furnace_standin_not_ready_answers");
  const auto peek_last_error = standin_function<int (*)()>("cudaPeekAtLastError");
  ASSERT_TRUE(set_not_ready && not_ready_answers && peek_last_error);
  struct Restore {
    SetNotReady set;
    ~Restore() { set(0); }
  } restore{set_not_ready};
  set_not_ready(2);

  TraceBus bus;
  std::vector<TraceEvent> spans;
  const int subscription = bus.subscribe([&](const TraceEvent& e) { spans.push_back(e); });
  const size_t n = 4096;
  std::vector<float> src(n), dst(n, 0.0f);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<float>(i) * 0.25f;
  {
    Runtime rt(cuda::make_backend(&bus), bus);
    Tensor t = Tensor::empty(rt, Device::cuda(0), {static_cast<int64_t>(n)});
    const long before = not_ready_answers();
    // The second pinned copy finds the first one's block still being read; the device clock then
    // polls both copies' spans.
    rt.backend().copy(CopyKind::h2d, t.raw(), 0, src.data(), -1, n * sizeof(float), 0, /*pinned=*/true);
    EXPECT_EQ(peek_last_error(), 0) << "a pinned copy left an error behind";
    rt.backend().copy(CopyKind::h2d, t.raw(), 0, src.data(), -1, n * sizeof(float), 0, /*pinned=*/true);
    EXPECT_EQ(peek_last_error(), 0) << "polling the pinned pool's event left cudaErrorNotReady behind";
    const long after_pool = not_ready_answers();
    EXPECT_GT(after_pool, before) << "the pinned pool never polled a copy in flight: this test tests nothing";
    EXPECT_GT(rt.backend().device_time(0), 0.0);
    EXPECT_EQ(peek_last_error(), 0) << "polling the trace's spans left cudaErrorNotReady behind";
    EXPECT_GT(not_ready_answers(), after_pool) << "the trace never polled a span in flight";
    OpContext ctx{rt, 0, 0};
    ops::copy_to_host(ctx, dst.data(), t);
    EXPECT_EQ(dst, src);
    rt.backend().synchronize(0);
    EXPECT_EQ(peek_last_error(), 0);
  }
  bus.unsubscribe(subscription);
  int copies = 0;
  for (const TraceEvent& e : spans) copies += e.kind == EventKind::copy && e.name == std::string("h2d");
  EXPECT_GE(copies, 2) << "the copies' spans were never emitted once done";
}

// CUDA events give times as float milliseconds: measured from one origin at the device's first use,
// an hour later they are 0.25 ms apart, coarser than a kernel. The stand-in's device clock here
// advances 0.123456789 s at each event recorded (FURNACE_STANDIN_EVENT_STEP_S), so a few thousand
// pinned copies span more than an hour, the device clock read every eighth copy as a training
// step reads it; the trace's copies must start a whole number of steps apart, to within a
// microsecond, to the last one.
TEST_F(StandinHost, TraceTimesStayExactAfterAnHourOnTheDevice) {
  using SetStep = void (*)(double);
  const auto set_step = standin_function<SetStep>("furnace_standin_set_event_step");
  ASSERT_TRUE(set_step);
  struct Restore {
    SetStep set;
    ~Restore() { set(0); }
  } restore{set_step};
  const double step = 0.123456789;
  set_step(step);

  TraceBus bus;
  std::vector<double> starts;
  const int subscription = bus.subscribe([&](const TraceEvent& e) {
    if (e.kind == EventKind::copy && e.name == std::string("h2d")) starts.push_back(e.start_s);
  });
  {
    Runtime rt(cuda::make_backend(&bus), bus);
    Tensor t = Tensor::empty(rt, Device::cuda(0), {1024});
    std::vector<float> src(1024, 2.0f);
    for (int i = 0; i < 8000; ++i) {
      rt.backend().copy(CopyKind::h2d, t.raw(), 0, src.data(), -1, src.size() * sizeof(float), 0, /*pinned=*/true);
      if (i % 8 == 7) rt.backend().device_time(0);  // as the training loop reads the clock each step
    }
    rt.backend().synchronize(0);
  }
  bus.unsubscribe(subscription);
  ASSERT_EQ(starts.size(), 8000u);
  ASSERT_GT(starts.back() - starts.front(), 3600.0) << "the stand-in's clock did not pass an hour";
  for (size_t i = 1; i < starts.size(); ++i) {
    const double apart = starts[i] - starts[i - 1];
    const double steps = std::round(apart / step);
    ASSERT_GE(steps, 1.0) << "copy " << i;
    ASSERT_NEAR(apart, steps * step, 1e-6) << "copy " << i << " at " << starts[i] - starts.front()
                                           << " s: the trace's times have lost their precision";
  }
}

// A rank thread's synchronize() emits its own device's spans only: another thread's span that has
// ended but whose kernel cost is still on its way keeps waiting for it (it went out with flops 0,
// and the cost found nothing to attach to).
TEST_F(StandinHost, SynchronizingOneDeviceLeavesAnotherDevicesSpanWaitingForItsCost) {
  TraceBus bus;
  std::vector<TraceEvent> spans;
  const int subscription = bus.subscribe([&](const TraceEvent& e) { spans.push_back(e); });
  {
    cuda::EventTrace trace(&bus, 2);
    cudaStream_t streams[2] = {nullptr, nullptr};
    for (int d = 0; d < 2; ++d) {
      ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
      ASSERT_EQ(cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking), cudaSuccess);
      trace.start_device(d, streams[d]);
    }
    for (int d = 0; d < 2; ++d) {
      ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
      const int64_t id = trace.begin(d, streams[d]);
      trace.end(id, streams[d], EventKind::kernel, "linear_forward", 0, 0, /*wants_cost=*/true);
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    trace.flush(/*wait=*/true, /*device=*/0);
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_EQ(spans[0].device, 0);
    KernelCost cost;
    cost.flops = 1234;
    cost.bytes = 56;
    trace.annotate(1, "linear_forward", cost);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    trace.flush(/*wait=*/true, /*device=*/1);
    ASSERT_EQ(spans.size(), 2u);
    EXPECT_EQ(spans[1].device, 1);
    EXPECT_EQ(spans[1].flops, 1234);
    EXPECT_EQ(spans[1].bytes, 56u);
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
    cudaSetDevice(0);  // as the next test expects to find it
  }
  bus.unsubscribe(subscription);
}

TEST_F(StandinHost, OutOfMemoryAtCudaMallocIsPyTorchsErrorAndTheAllocatorStaysUsable) {
  TraceBus bus;
  Runtime rt(cuda::make_backend(&bus), bus);
  rt.set_device(0);
  // 1 GiB, 300 MiB taken by the context: 800 MiB cannot be had, 600 MiB can.
  try {
    rt.allocator(0).allocate(800ull << 20);
    FAIL() << "expected out of memory";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("CUDA out of memory. Tried to allocate 800.00 MiB. GPU 0 has a total "
                                          "capacity of 1024.00 MiB of which 724.00 MiB is free.", 0),
              0u)
        << e.what();
  }
  void* p = rt.allocator(0).allocate(600ull << 20);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(rt.memory_reserved(0), 600ull << 20);
  rt.allocator(0).deallocate(p);
}

// PyTorch's "Including non-PyTorch memory, this process has X memory in use" counts the CUDA
// context: NVML's figure for this process less what it cudaMalloc'ed.
TEST_F(StandinHost, TheProcesssMemoryInUseCountsItsCudaContext) {
  TraceBus bus;
  Runtime rt(cuda::make_backend(&bus), bus);
  rt.set_device(0);
  EXPECT_EQ(rt.backend().raw_allocator(0).process_overhead_bytes(), 300ull << 20);
  void* p = rt.allocator(0).allocate(100ull << 20);
  EXPECT_EQ(rt.backend().raw_allocator(0).process_overhead_bytes(), 300ull << 20);  // not the 100
  try {
    rt.allocator(0).allocate(700ull << 20);
    FAIL() << "expected out of memory";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("Including non-PyTorch memory, this process has 400.00 MiB memory in use."),
              std::string::npos)
        << e.what();
  }
  rt.allocator(0).deallocate(p);
}

// cuBLAS's workspace as PyTorch takes it (issue 14): from the caching allocator at the device's
// first GEMM (32 MiB on these Hopper stand-ins), and handed to the handle after every
// cublasSetStream (the stand-in's GEMM refuses to run on cuBLAS's own pool). The GEMM itself
// cannot run here: it reports NOT_SUPPORTED, after the workspace checks.
TEST_F(StandinHost, CublasGetsItsWorkspaceFromTheCachingAllocatorBeforeItsFirstGemm) {
  auto last_workspace = standin_function<size_t (*)()>("furnace_standin_last_gemm_workspace_bytes");
  ASSERT_NE(last_workspace, nullptr);
  for (const char* config : {static_cast<const char*>(nullptr), ":16:8"}) {
    SCOPED_TRACE(config ? config : "(default)");
    if (config) ::setenv("CUBLAS_WORKSPACE_CONFIG", config, 1);
    else ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
    const size_t expected = config ? 131072 : 33554432;
    TraceBus bus;
    Runtime rt(cuda::make_backend(&bus), bus);
    OpContext ctx{rt, 0, 0};
    Tensor x = Tensor::empty(rt, Device::cuda(0), {4, 3});
    Tensor w = Tensor::empty(rt, Device::cuda(0), {2, 3});
    Tensor dy = Tensor::empty(rt, Device::cuda(0), {4, 2});
    Tensor dx = Tensor::empty(rt, Device::cuda(0), {4, 3});
    Tensor dw = Tensor::empty(rt, Device::cuda(0), {2, 3});
    Tensor db = Tensor::empty(rt, Device::cuda(0), {2});
    const size_t tensors = rt.memory_allocated(0);
    try {
      ops::linear_backward(ctx, &dx, dw, db, dy, x, w);  // memsets, then the dgrad GEMM
      FAIL() << "a GEMM ran on the stand-in";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos) << e.what();
    }
    EXPECT_EQ(last_workspace(), expected);
    EXPECT_EQ(rt.memory_allocated(0), tensors + expected);
    EXPECT_EQ(rt.memory_allocated(1), 0u);
  }
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
}

TEST_F(StandinHost, MemGetInfoCountsTheContext) {
  TraceBus bus;
  Runtime rt(cuda::make_backend(&bus), bus);
  rt.set_device(0);  // creates the context
  const MemInfo m = rt.mem_get_info(0);
  EXPECT_EQ(m.total_bytes, 1024ull << 20);
  EXPECT_EQ(m.free_bytes, 724ull << 20);
}

}  // namespace
}  // namespace furnace

// Re-run under the stand-in: LD_PRELOAD must be set before the process starts.
int main(int argc, char** argv) {
  if (!std::getenv("FURNACE_STANDIN_REEXEC")) {
    ::setenv("FURNACE_STANDIN_REEXEC", "1", 1);
    ::setenv("LD_PRELOAD", FURNACE_CUDA_STANDIN, 1);
    const std::string lib = FURNACE_CUDA_STANDIN;  // its folder also holds libnvidia-ml.so.1
    ::setenv("LD_LIBRARY_PATH", lib.substr(0, lib.rfind('/')).c_str(), 1);
    ::setenv("FURNACE_STANDIN_GPUS", "2", 1);
    ::setenv("FURNACE_STANDIN_MEMORY_MIB", "1024", 1);
    ::setenv("FURNACE_STANDIN_CONTEXT_MIB", "300", 1);
    ::setenv("FURNACE_STANDIN_DRIVER", "ok", 1);
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    ::execv("/proc/self/exe", argv);
    std::perror("test_cuda_standin_host: re-running under the stand-in runtime");
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
