// The sim backend: CPU execution with a modelled GPU clock.
#include "backend/sim/sim_backend.h"

#include <algorithm>
#include <cstring>

#include "backend/sim/host_pages.h"  // defines: map_host_pages
#include "furnace/error.h"

namespace furnace {

// ---- device memory ----------------------------------------------------------------------------

SimDeviceMemory::~SimDeviceMemory() = default;

void* SimDeviceMemory::raw_malloc(size_t bytes) {
  const size_t capacity = spec_.memory_bytes - spec_.context_bytes;
  if (bytes == 0 || bytes > capacity - used_) return nullptr;  // cudaErrorMemoryAllocation
  void* p = map_host_pages(bytes, spec_.name);
  used_ += bytes;
  return p;
}

void SimDeviceMemory::raw_free(void* ptr, size_t bytes) {
  if (!ptr) return;
  unmap_host_pages(ptr, bytes);
  used_ -= bytes;
}

void SimDeviceMemory::mem_get_info(size_t* free_bytes, size_t* total_bytes) {
  *total_bytes = spec_.memory_bytes;
  *free_bytes = spec_.memory_bytes - spec_.context_bytes - used_;
}

// ---- backend ----------------------------------------------------------------------------------

SimBackend::SimBackend(const Topology& topology, TraceBus* trace)
    : topology_(topology), trace_(trace) {
  FURNACE_CHECK(!topology_.gpus.empty()) << "topology '" << topology_.name << "' has no GPUs";
  for (const GpuSpec& g : topology_.gpus) {
    FURNACE_CHECK(g.memory_bytes > g.context_bytes)
        << "topology '" << topology_.name << "': " << g.name << " has no memory left after its "
        << "CUDA context";
    memory_.push_back(std::make_unique<SimDeviceMemory>(g));
    clocks_.push_back(std::make_unique<DeviceClock>());
  }
  if (trace_) trace_->set_clock([this](int device) { return device_time(device); });
}

SimBackend::~SimBackend() {
  if (trace_) trace_->set_clock(nullptr);
}

const GpuSpec& SimBackend::device_spec(int device) const {
  FURNACE_CHECK(device >= 0 && device < device_count())
      << "CUDA error: invalid device ordinal " << device << " (" << device_count() << " devices)";
  return topology_.gpus[static_cast<size_t>(device)];
}

RawAllocator& SimBackend::raw_allocator(int device) {
  device_spec(device);  // bounds check
  return *memory_[static_cast<size_t>(device)];
}

double SimBackend::advance(int device, int stream, double not_before, double seconds) {
  FURNACE_ASSERT(stream >= 0) << "negative stream " << stream;
  DeviceClock& dc = *clocks_.at(static_cast<size_t>(device));
  std::lock_guard<std::mutex> lock(dc.mutex);
  if (static_cast<size_t>(stream) >= dc.streams.size()) dc.streams.resize(static_cast<size_t>(stream) + 1, 0.0);
  double& c = dc.streams[static_cast<size_t>(stream)];
  const double start = std::max(c, not_before);
  c = start + seconds;
  dc.busy += seconds;
  return start;
}

double SimBackend::stream_time(int device, int stream) const {
  if (device < 0 || device >= device_count() || stream < 0) return 0.0;
  const DeviceClock& dc = *clocks_.at(static_cast<size_t>(device));
  std::lock_guard<std::mutex> lock(dc.mutex);
  return static_cast<size_t>(stream) < dc.streams.size() ? dc.streams[static_cast<size_t>(stream)] : 0.0;
}

double SimBackend::device_time(int device) const {
  if (device < 0 || device >= device_count()) return 0.0;
  const DeviceClock& dc = *clocks_[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(dc.mutex);
  return *std::max_element(dc.streams.begin(), dc.streams.end());
}

double SimBackend::device_busy_time(int device) const {
  if (device < 0 || device >= device_count()) return 0.0;
  const DeviceClock& dc = *clocks_[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(dc.mutex);
  return dc.busy;
}

void SimBackend::emit(EventKind kind, const char* name, int device, int stream, double start,
                      double dur, uint64_t bytes, double flops) {
  if (!trace_ || !trace_->active()) return;
  TraceEvent e;
  e.kind = kind;
  e.name = name;
  e.device = device;
  e.stream = stream;
  e.start_s = start;
  e.dur_s = dur;
  e.bytes = bytes;
  e.flops = flops;
  trace_->emit(e);
}

void SimBackend::copy(CopyKind kind, void* dst, int dst_device, const void* src, int src_device,
                      size_t bytes, int stream, bool pinned) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
  model_copy(kind, dst_device, src_device, bytes, stream, pinned);
}

bool SimBackend::model_copy(CopyKind kind, int dst_device, int src_device, size_t bytes,
                            int stream, bool pinned) {
  // The copy runs on a stream of the device that issues it: the destination for h2d, the source
  // for d2h and peer (ATen's copy_ between two GPUs runs on the source's current stream).
  const int device = kind == CopyKind::h2d ? dst_device : src_device;
  const GpuSpec& gpu = device_spec(device);
  double seconds = 0;
  switch (kind) {
    case CopyKind::h2d:
    case CopyKind::d2h:
      seconds = model_copy_seconds(static_cast<double>(bytes),
                                   pinned ? topology_.host.pinned_bandwidth
                                          : topology_.host.pageable_bandwidth,
                                   topology_.host.latency_s);
      break;
    case CopyKind::d2d:  // read + write in the same device memory
      seconds = model_copy_seconds(2.0 * static_cast<double>(bytes), gpu.memory_bandwidth,
                                   gpu.launch_latency_s);
      break;
    case CopyKind::peer: {
      LinkSpec link = topology_.link_between(src_device, dst_device);
      seconds = model_copy_seconds(static_cast<double>(bytes), link.bandwidth, link.latency_s);
      break;
    }
  }
  if (kind == CopyKind::peer && src_device != dst_device) {
    // ATen's copy_ between two GPUs (aten/src/ATen/native/cuda/Copy.cu) is a two-way barrier: the
    // source's stream first waits for the destination's (nobody may still be using the
    // destination memory), the copy runs on the source's stream, then the destination's stream
    // waits for it (nobody may read the data early). So the copy starts at max(source stream,
    // destination stream) and both streams are held until it ends. This is what serialises
    // DataParallel's broadcast, gather and reduce-add on GPU 0: every copy to or from it holds
    // GPU 0's stream. Lock order: one device at a time, never both (no deadlock).
    const double ready = std::max(stream_time(src_device, stream), stream_time(dst_device, stream));
    const double start = advance(src_device, stream, ready, seconds);
    advance(dst_device, stream, start, seconds);
    emit(EventKind::copy, copy_kind_name(kind), src_device, stream, start, seconds, bytes, 0);
    return true;
  }
  const double start = advance(device, stream, 0.0, seconds);
  emit(EventKind::copy, copy_kind_name(kind), device, stream, start, seconds, bytes, 0);
  return true;
}

bool SimBackend::model_collective(int device, int stream, const char* name, double not_before_s,
                                  double seconds, size_t bytes) {
  device_spec(device);  // bounds check
  const double start = advance(device, stream, not_before_s, seconds);
  emit(EventKind::copy, name, device, stream, start, seconds, bytes, 0);
  return true;
}

void SimBackend::model_stream_wait(int device, int stream, double until_s) {
  device_spec(device);  // bounds check
  advance(device, stream, until_s, 0.0);
}

double SimBackend::model_host_wait(int device, int stream, double host_s) {
  device_spec(device);  // bounds check
  const double before = stream_time(device, stream);
  if (host_s <= before) return 0;
  advance(device, stream, host_s, 0);  // idle: the clock moves, the busy time does not
  emit(EventKind::phase, "waiting for data (host loading)", device, stream, before, host_s - before, 0, 0);
  return host_s - before;
}

void SimBackend::memset(int device, void* ptr, int value, size_t bytes, int stream) {
  if (bytes > 0) std::memset(ptr, value, bytes);
  account_kernel(device, stream, "memset", KernelCost{0, static_cast<double>(bytes), DType::u8});
}

void SimBackend::account_kernel(int device, int stream, const char* name,
                                const KernelCost& cost) {
  const double seconds = model_kernel_seconds(device_spec(device), cost);
  const double start = advance(device, stream, 0.0, seconds);
  emit(EventKind::kernel, name, device, stream, start, seconds, static_cast<uint64_t>(cost.bytes),
       cost.flops);
}

std::unique_ptr<Backend> make_sim_backend(const Topology& topology, TraceBus* trace) {
  return std::make_unique<SimBackend>(topology, trace);
}

}  // namespace furnace
