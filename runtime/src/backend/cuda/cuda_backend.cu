// The CUDA backend: devices as the CUDA runtime enumerates them (after CUDA_VISIBLE_DEVICES), their
// properties as a GpuSpec, raw memory through cudaMalloc, and per device (created at its first use,
// as PyTorch's lazy init): a compute stream every op and copy of the device runs on, a copy stream
// for pinned host-to-device copies, a cuBLAS handle. The op table is ops/cuda (CudaOps); NCCL
// serves DataParallel's broadcast and reduce where it was found (FURNACE_NCCL=0 turns it off);
// while a trace is recorded, every kernel and copy is timed with CUDA events (event_trace.h).
//
// Stream rules (what keeps the caching allocator's reuse safe):
//   - every logical stream of a device maps to its one compute stream, so a block freed by the
//     host is reused only by work queued behind the work that used it;
//   - a pinned h2d copy runs on the copy stream after waiting for the compute stream (the
//     destination may be a reused block still being read), and the compute stream waits for it;
//   - a peer copy runs on the source's stream between two waits (ATen's copy_ between GPUs): the
//     source waits for the destination's stream, the destination waits for the copy.
//   - d2h copies wait for the copy to land (tensor.cpu() / .item() semantics).
#include "backend/cuda/cuda_backend.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"  // defines: DeviceResources
#include "backend/cuda/event_trace.h"
#include "backend/pinned_pool.h"
#include "machine/nvml_process.h"  // defines: nvml_process_memory
#include "furnace/trace.h"
#include "backend/cuda/ops/cuda_ops.h"  // defines: make_cuda_ops
#ifdef FURNACE_WITH_NCCL
#include "backend/cuda/nccl_comms.h"
#include "backend/cuda/nccl_rank_comm.h"  // defines: make_nccl_rank_communicator, nccl_unique_id
#endif

namespace furnace::cuda {
namespace {

class CudaDeviceMemory : public RawAllocator {
 public:
  CudaDeviceMemory(int device, std::string uuid) : device_(device), uuid_(std::move(uuid)) {}
  void* raw_malloc(size_t bytes) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the (non-sticky) error so later calls are not blamed
      return nullptr;
    }
    FURNACE_CUDA_CHECK(err);
    malloced_ += bytes;
    return p;
  }
  void raw_free(void* ptr, size_t bytes) override {
    DeviceGuard g(device_);
    FURNACE_CUDA_CHECK(cudaFree(ptr));
    malloced_ -= bytes;
  }
  // What NVML counts for this process on the GPU beyond what it cudaMalloc'ed: the CUDA context,
  // the loaded kernels, cuBLAS's own workspace (PyTorch's "Including non-PyTorch memory, this
  // process has X memory in use"). 0 where NVML cannot say (no NVML, or MIG).
  size_t process_overhead_bytes() override {
    uint64_t used = 0;
    if (!nvml_process_memory(uuid_, static_cast<unsigned>(::getpid()), &used)) return 0;
    const uint64_t mine = malloced_.load();
    return used > mine ? static_cast<size_t>(used - mine) : 0;
  }
  void mem_get_info(size_t* free_bytes, size_t* total_bytes) override {
    DeviceGuard g(device_);
    FURNACE_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
  }
  void synchronize() override {
    DeviceGuard g(device_);
    FURNACE_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  int device_;
  std::string uuid_;
  std::atomic<uint64_t> malloced_{0};  // bytes cudaMalloc'ed through this allocator, not yet freed
};

// Page-locked host memory and the events that say when a copy has read it (PinnedPool::Host).
// Portable: a block may feed a copy to any device.
class CudaPinnedHost : public PinnedPool::Host {
 public:
  void* alloc_pinned(size_t bytes) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void free_pinned(void* ptr) override { cudaFreeHost(ptr); }  // also from destructors: no throw
  bool event_done(void* event) override {
    return FURNACE_CUDA_QUERY(cudaEventQuery(static_cast<cudaEvent_t>(event)));
  }
  void wait_event(void* event) override { cudaEventSynchronize(static_cast<cudaEvent_t>(event)); }
  void release_event(void* event) override { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
};

// An event for ordering streams only (no timing), destroyed once queued waits have captured it:
// a recorded event may be destroyed at once, the driver frees it when it completes. It belongs to
// the device current at construction.
class OrderEvent {
 public:
  OrderEvent() { FURNACE_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  ~OrderEvent() { cudaEventDestroy(e_); }
  OrderEvent(const OrderEvent&) = delete;
  OrderEvent& operator=(const OrderEvent&) = delete;
  // `later` runs its next work only after what is queued on `earlier` now. `earlier` must be on
  // the current device.
  void order(cudaStream_t earlier, cudaStream_t later) {
    FURNACE_CUDA_CHECK(cudaEventRecord(e_, earlier));
    FURNACE_CUDA_CHECK(cudaStreamWaitEvent(later, e_, 0));
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Per device, created at first use.
struct DeviceState {
  std::once_flag once;
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  cublasHandle_t cublas = nullptr;
  std::mutex cublas_mutex;
  std::atomic<bool> ready{false};  // read by device_time() without the once_flag
};

GpuSpec spec_from_properties(int device) {
  cudaDeviceProp p{};
  FURNACE_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  GpuSpec g;
  g.name = p.name;
  char uuid[64];
  const unsigned char* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  std::snprintf(uuid, sizeof uuid,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  g.uuid = uuid;
  char bus[32];
  std::snprintf(bus, sizeof bus, "%08X:%02X:%02X.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
  g.pci_bus_id = bus;
  g.memory_bytes = p.totalGlobalMem;
  g.sm_count = p.multiProcessorCount;
  g.compute_capability_major = p.major;
  g.compute_capability_minor = p.minor;
  int clock_khz = 0, mem_clock_khz = 0, bus_width = 0;
  FURNACE_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  FURNACE_CUDA_CHECK(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device));
  FURNACE_CUDA_CHECK(cudaDeviceGetAttribute(&bus_width, cudaDevAttrGlobalMemoryBusWidth, device));
  // Rough figures for the timing model only; the cuda backend measures real time.
  g.peak_flops_f32 = 2.0 * 128.0 * p.multiProcessorCount * clock_khz * 1e3;
  g.peak_flops_f16 = 8.0 * g.peak_flops_f32;
  g.peak_flops_bf16 = g.peak_flops_f16;
  g.memory_bandwidth = 2.0 * mem_clock_khz * 1e3 * (bus_width / 8.0);
  g.launch_latency_s = 5e-6;
  return g;
}

class CudaBackend final : public Backend, public DeviceResources {
 public:
  CudaBackend(TraceBus* trace, std::vector<int> physical)
      : trace_(trace), physical_(std::move(physical)) {
    // The runtime's count, qualified: unqualified, `device_count()` here is this class's own
    // (specs_.size(), still 0), which left every CUDA process with no device (issue 14).
    const int n = ::furnace::cuda::device_count();
    for (int d = 0; d < n; ++d) {
      specs_.push_back(spec_from_properties(d));
      memory_.push_back(std::make_unique<CudaDeviceMemory>(d, specs_.back().uuid));
      states_.push_back(std::make_unique<DeviceState>());
    }
    events_ = std::make_unique<EventTrace>(trace_, n);
    pinned_ = std::make_unique<PinnedPool>(pinned_host_);
    ops_ = make_cuda_ops(*this, n);
    use_nccl_ = nccl_requested();
#ifdef FURNACE_WITH_NCCL
    nccl_ = std::make_unique<NcclComms>();
#endif
    // Host-side events (allocations) are stamped on the host clock the CUDA events are placed on.
    if (trace_) trace_->set_clock([this](int) { return events_->host_now(); });
  }

  ~CudaBackend() override {
    int caller_device = -1;  // put back at the end: teardown makes each device current in turn
    if (cudaGetDevice(&caller_device) != cudaSuccess) caller_device = -1;
    if (trace_) trace_->set_clock(nullptr);
    for (size_t d = 0; d < states_.size(); ++d) {  // let queued work finish before tearing down
      if (!states_[d]->ready) continue;
      if (cudaSetDevice(static_cast<int>(d)) == cudaSuccess) cudaDeviceSynchronize();
    }
    events_.reset();
    pinned_.reset();
#ifdef FURNACE_WITH_NCCL
    nccl_.reset();
#endif
    ops_.reset();
    for (size_t d = 0; d < states_.size(); ++d) {
      DeviceState& s = *states_[d];
      if (!s.ready) continue;
      cudaSetDevice(static_cast<int>(d));
      if (s.cublas) cublasDestroy(s.cublas);
      if (s.copy) cudaStreamDestroy(s.copy);
      if (s.compute) cudaStreamDestroy(s.compute);
    }
    // Back to the caller's device, where it is another one this backend used: cudaSetDevice
    // would create a context on a GPU nobody touched (the stray context the lessons warn about).
    int now = -1;
    if (caller_device >= 0 && static_cast<size_t>(caller_device) < states_.size() &&
        states_[static_cast<size_t>(caller_device)]->ready && cudaGetDevice(&now) == cudaSuccess && now != caller_device)
      cudaSetDevice(caller_device);
  }

  // ---- Backend --------------------------------------------------------------------------------
  const char* name() const override { return "cuda"; }
  int device_count() const override { return static_cast<int>(specs_.size()); }
  const GpuSpec& device_spec(int device) const override { return specs_.at(static_cast<size_t>(device)); }
  RawAllocator& raw_allocator(int device) override { return *memory_.at(static_cast<size_t>(device)); }
  bool host_accessible() const override { return false; }
  OpTable& op_table() override { return *ops_; }

  // cudaSetDevice creates the device's primary context (CUDA 12 and later).
  void use_device(int device) override { FURNACE_CUDA_CHECK(cudaSetDevice(device)); }
  int physical_index(int device) const override {
    return device >= 0 && static_cast<size_t>(device) < physical_.size() ? physical_[static_cast<size_t>(device)] : -1;
  }
  std::string describe_devices() const override {
    std::string s = "this process sees " + std::to_string(specs_.size()) + " CUDA device" +
                    (specs_.size() == 1 ? "" : "s");
    for (size_t d = 0; d < specs_.size() && d < physical_.size(); ++d)
      s += (d ? ", " : ": ") + ("cuda:" + std::to_string(d) + " = GPU " + std::to_string(physical_[d]));
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    s += v ? std::string(" (CUDA_VISIBLE_DEVICES=") + v + ")" : std::string(" (CUDA_VISIBLE_DEVICES not set)");
    return s;
  }

  void copy(CopyKind kind, void* dst, int dst_device, const void* src, int src_device,
            size_t bytes, int stream, bool pinned) override {
    if (bytes == 0) return;
    if (kind == CopyKind::peer && dst_device == src_device) kind = CopyKind::d2d;
    switch (kind) {
      case CopyKind::h2d: {
        DeviceGuard g(dst_device);
        DeviceState& s = state(dst_device);
        if (pinned && copy_h2d_pinned(s, dst_device, dst, src, bytes, stream)) return;
        ScopedSpan span(*events_, dst_device, s.compute, stream, "h2d", EventKind::copy, bytes, false);
        // From pageable memory the driver stages the bytes before returning: `src` may be reused.
        FURNACE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s.compute));
        return;
      }
      case CopyKind::d2h: {
        DeviceGuard g(src_device);
        DeviceState& s = state(src_device);
        {
          ScopedSpan span(*events_, src_device, s.compute, stream, "d2h", EventKind::copy, bytes, false);
          FURNACE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s.compute));
        }
        FURNACE_CUDA_CHECK(cudaStreamSynchronize(s.compute));
        return;
      }
      case CopyKind::d2d: {
        DeviceGuard g(dst_device);
        DeviceState& s = state(dst_device);
        ScopedSpan span(*events_, dst_device, s.compute, stream, "d2d", EventKind::copy, bytes, false);
        FURNACE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s.compute));
        return;
      }
      case CopyKind::peer:
        copy_peer(dst, dst_device, src, src_device, bytes, stream);
        return;
    }
  }

  void memset(int device, void* ptr, int value, size_t bytes, int stream) override {
    if (bytes == 0) return;
    DeviceGuard g(device);
    DeviceState& s = state(device);
    ScopedSpan span(*events_, device, s.compute, stream, "memset", EventKind::kernel, bytes, false);
    FURNACE_CUDA_CHECK(cudaMemsetAsync(ptr, value, bytes, s.compute));
  }

  void account_kernel(int device, int /*stream*/, const char* name, const KernelCost& cost) override {
    if (events_->active()) events_->annotate(device, name, cost);
  }

  // Measured, and only while a trace is recorded (it waits for the device); 0 otherwise.
  double device_time(int device) const override {
    if (!events_->active() || device < 0 || device >= device_count()) return 0.0;
    const DeviceState& s = *states_[static_cast<size_t>(device)];
    if (!s.ready) return 0.0;
    DeviceGuard g(device);
    return events_->device_now(device, s.compute);
  }

  void synchronize(int device) override {
    DeviceGuard g(device);
    FURNACE_CUDA_CHECK(cudaDeviceSynchronize());
    // This device's spans only: another thread's device may have a span whose cost is still on
    // its way (DataParallel's and DDP's rank threads synchronize each their own).
    events_->flush(/*wait=*/true, device);
  }

  bool collectives_available(const std::vector<int>& devices, DType dtype) const override {
#ifdef FURNACE_WITH_NCCL
    return nccl_usable(devices, dtype);
#else
    (void)devices, (void)dtype;
    return false;
#endif
  }

  bool broadcast(const std::vector<void*>& buffers, const std::vector<int>& devices, int root,
                 size_t count, DType dtype, int stream) override {
#ifdef FURNACE_WITH_NCCL
    if (!nccl_usable(devices, dtype)) return false;
    const std::vector<cudaStream_t> streams = streams_of(devices);
    DeviceGuard g(devices[static_cast<size_t>(root)]);
    ScopedSpan span(*events_, devices[static_cast<size_t>(root)], streams[static_cast<size_t>(root)],
                    stream, "nccl_broadcast", EventKind::copy, count * dtype_size(dtype), false);
    nccl_->broadcast(buffers, devices, streams, root, count, dtype);
    return true;
#else
    (void)buffers, (void)devices, (void)root, (void)count, (void)dtype, (void)stream;
    return false;
#endif
  }

  bool reduce_sum(void* result, const std::vector<const void*>& buffers,
                  const std::vector<int>& devices, int root, size_t count, DType dtype,
                  int stream) override {
#ifdef FURNACE_WITH_NCCL
    if (!nccl_usable(devices, dtype)) return false;
    const std::vector<cudaStream_t> streams = streams_of(devices);
    DeviceGuard g(devices[static_cast<size_t>(root)]);
    ScopedSpan span(*events_, devices[static_cast<size_t>(root)], streams[static_cast<size_t>(root)],
                    stream, "nccl_reduce", EventKind::copy, count * dtype_size(dtype), false);
    nccl_->reduce_sum(result, buffers, devices, streams, root, count, dtype);
    return true;
#else
    (void)result, (void)buffers, (void)devices, (void)root, (void)count, (void)dtype, (void)stream;
    return false;
#endif
  }

#ifdef FURNACE_WITH_NCCL
  // Between processes (one GPU each): the communicator's collectives wait for the device's compute
  // stream, which every logical stream maps to. Without NCCL, Backend's defaults say so.
  std::vector<char> comm_unique_id() override { return nccl_unique_id(); }
  std::unique_ptr<RankCommunicator> make_rank_communicator(const std::vector<char>& id, int rank, int nranks,
                                                           int device, std::chrono::milliseconds timeout) override {
    DeviceGuard g(device);
    return make_nccl_rank_communicator(id, rank, nranks, device, state(device).compute, timeout);
  }
#endif

  // ---- DeviceResources ------------------------------------------------------------------------
  cudaStream_t stream(int device) override { return state(device).compute; }
  cublasHandle_t cublas(int device) override { return state(device).cublas; }
  std::mutex& cublas_mutex(int device) override { return state(device).cublas_mutex; }
  int sm_count(int device) const override { return specs_.at(static_cast<size_t>(device)).sm_count; }
  EventTrace& events() override { return *events_; }

 private:
  // The device's streams and handle, created at its first use (thread-safe). Device current.
  DeviceState& state(int device) {
    FURNACE_CHECK(device >= 0 && device < device_count())
        << "CUDA error: invalid device ordinal (cuda:" << device << ": " << describe_devices() << ")";
    DeviceState& s = *states_[static_cast<size_t>(device)];
    std::call_once(s.once, [&] {
      DeviceGuard g(device);
      FURNACE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking));
      FURNACE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.copy, cudaStreamNonBlocking));
      FURNACE_CUBLAS_CHECK(cublasCreate(&s.cublas));
      // fp16 GEMMs accumulate in fp32 all the way (no reduced-precision split-K reductions).
      FURNACE_CUBLAS_CHECK(cublasSetMathMode(
          s.cublas, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
      events_->start_device(device, s.compute);
      s.ready = true;
    });
    return s;
  }

  // pin_memory's copy into page-locked memory, then a non_blocking copy on the copy stream. False
  // when no page-locked block could be had (the caller copies from pageable memory instead).
  bool copy_h2d_pinned(DeviceState& s, int device, void* dst, const void* src, size_t bytes,
                       int stream) {
    void* block = pinned_->acquire(bytes);
    if (!block) return false;
    void* done_event = nullptr;
    try {
      std::memcpy(block, src, bytes);
      OrderEvent dst_free;
      dst_free.order(s.compute, s.copy);  // earlier work on the destination's memory comes first
      {
        ScopedSpan span(*events_, device, s.copy, stream, "h2d", EventKind::copy, bytes, false);
        FURNACE_CUDA_CHECK(cudaMemcpyAsync(dst, block, bytes, cudaMemcpyHostToDevice, s.copy));
      }
      cudaEvent_t done = nullptr;
      FURNACE_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
      done_event = done;
      FURNACE_CUDA_CHECK(cudaEventRecord(done, s.copy));
      FURNACE_CUDA_CHECK(cudaStreamWaitEvent(s.compute, done, 0));  // kernels read it after it landed
    } catch (...) {
      // The copy may or may not be queued: wait for the copy stream before the block is reused.
      cudaStreamSynchronize(s.copy);
      if (done_event) cudaEventDestroy(static_cast<cudaEvent_t>(done_event));
      pinned_->release(block, nullptr);
      throw;
    }
    pinned_->release(block, done_event);  // reused once the copy has read it
    return true;
  }

  // ATen's copy_ between two GPUs: a two-way barrier around a copy on the source's stream. An event
  // belongs to the device current when it is created and can be recorded only on that device's
  // streams; any stream may wait for it.
  void copy_peer(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                 int stream) {
    DeviceState& d = state(dst_device);
    DeviceState& s = state(src_device);
    enable_peer_access(src_device, dst_device);
    DeviceGuard on_dst(dst_device);
    OrderEvent dst_ready;  // what is queued on the destination so far
    FURNACE_CUDA_CHECK(cudaEventRecord(dst_ready.get(), d.compute));
    DeviceGuard on_src(src_device);
    FURNACE_CUDA_CHECK(cudaStreamWaitEvent(s.compute, dst_ready.get(), 0));
    {
      ScopedSpan span(*events_, src_device, s.compute, stream, "peer", EventKind::copy, bytes, false);
      FURNACE_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, s.compute));
    }
    OrderEvent copied;  // on the source device
    FURNACE_CUDA_CHECK(cudaEventRecord(copied.get(), s.compute));
    FURNACE_CUDA_CHECK(cudaStreamWaitEvent(d.compute, copied.get(), 0));
  }

  // Direct peer-to-peer copies where the hardware allows them (else the driver stages through the
  // host). Both directions, once per pair.
  void enable_peer_access(int a, int b) {
    std::lock_guard<std::mutex> lock(peer_mutex_);
    if (!peer_pairs_.insert({std::min(a, b), std::max(a, b)}).second) return;
    for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
      int can = 0;
      FURNACE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, from, to));
      if (!can) continue;
      DeviceGuard g(from);
      const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError();
      else
        FURNACE_CUDA_CHECK(e);
    }
  }

#ifdef FURNACE_WITH_NCCL
  bool nccl_usable(const std::vector<int>& devices, DType dtype) const {
    if (!use_nccl_ || devices.size() < 2 || !NcclComms::supports(dtype)) return false;
    const std::set<int> distinct(devices.begin(), devices.end());
    return distinct.size() == devices.size();
  }
  std::vector<cudaStream_t> streams_of(const std::vector<int>& devices) {
    std::vector<cudaStream_t> streams;
    for (int d : devices) streams.push_back(state(d).compute);
    return streams;
  }
#endif

  TraceBus* trace_;
  std::vector<int> physical_;
  std::vector<GpuSpec> specs_;
  std::vector<std::unique_ptr<CudaDeviceMemory>> memory_;
  std::vector<std::unique_ptr<DeviceState>> states_;
  std::unique_ptr<EventTrace> events_;
  CudaPinnedHost pinned_host_;
  std::unique_ptr<PinnedPool> pinned_;
  std::unique_ptr<OpTable> ops_;
  bool use_nccl_ = true;
#ifdef FURNACE_WITH_NCCL
  std::unique_ptr<NcclComms> nccl_;
#endif
  std::mutex peer_mutex_;
  std::set<std::pair<int, int>> peer_pairs_;
};

}  // namespace

int device_count() {
  int n = 0;
  // Without a driver this fails ("CUDA driver version is insufficient..."), not 0 devices.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_backend(TraceBus* trace, std::vector<int> physical) {
  return std::make_unique<CudaBackend>(trace, std::move(physical));
}

DriverStatus runtime_status() {
  DriverStatus s;
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    s.error_name = cudaGetErrorName(err);
    s.error_text = cudaGetErrorString(err);
    cudaGetLastError();
    n = 0;
  }
  s.device_count = n;
  // Both succeed without a driver: the driver version is then 0.
  if (cudaDriverGetVersion(&s.driver_version) != cudaSuccess) s.driver_version = 0;
  if (cudaRuntimeGetVersion(&s.runtime_version) != cudaSuccess) s.runtime_version = CUDART_VERSION;
  cudaGetLastError();
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    s.visible_devices_set = true;
    s.visible_devices = v;
  }
  s.kind = classify(err == cudaSuccess, n, err == cudaErrorInsufficientDriver, err == cudaErrorNoDevice,
                    s.driver_version, s.runtime_version);
  return s;
}

std::vector<GpuSpec> logical_devices(std::string* error) {
  std::vector<GpuSpec> out;
  const DriverStatus s = runtime_status();
  if (s.kind != DriverStatus::Kind::ok) {
    if (error) *error = explain(s);
    return out;
  }
  for (int d = 0; d < s.device_count; ++d) out.push_back(spec_from_properties(d));
  return out;
}

}  // namespace furnace::cuda
