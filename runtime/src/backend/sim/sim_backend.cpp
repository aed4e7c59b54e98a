// The sim backend: CPU execution with a modelled GPU clock.
#include "backend/sim/sim_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "furnace/error.h"

namespace furnace {

// ---- device memory ----------------------------------------------------------------------------

SimDeviceMemory::~SimDeviceMemory() = default;

void* SimDeviceMemory::raw_malloc(size_t bytes) {
  const size_t capacity = spec_.memory_bytes - spec_.context_bytes;
  if (bytes == 0 || bytes > capacity - used_) return nullptr;  // cudaErrorMemoryAllocation
  // MAP_NORESERVE: pages are backed only when an op writes them, so a large simulated device
  // costs host memory only for what training really touches.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  used_ += bytes;
  return p;
}

void SimDeviceMemory::raw_free(void* ptr, size_t bytes) {
  if (!ptr) return;
  ::munmap(ptr, bytes);
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
    clocks_.emplace_back(1, 0.0);
  }
  if (trace_) trace_->set_clock([this](int device) { return device_time(device); });
}

SimBackend::~SimBackend() {
  if (trace_) trace_->set_clock(nullptr);
}

const GpuSpec& SimBackend::device_spec(int device) const {
  FURNACE_CHECK(device >= 0 && device < device_count())
      << "invalid device ordinal " << device << " (" << device_count() << " devices)";
  return topology_.gpus[static_cast<size_t>(device)];
}

RawAllocator& SimBackend::raw_allocator(int device) {
  device_spec(device);  // bounds check
  return *memory_[static_cast<size_t>(device)];
}

double& SimBackend::clock(int device, int stream) {
  auto& streams = clocks_.at(static_cast<size_t>(device));
  if (static_cast<size_t>(stream) >= streams.size()) streams.resize(static_cast<size_t>(stream) + 1, 0.0);
  return streams[static_cast<size_t>(stream)];
}

double SimBackend::device_time(int device) const {
  if (device < 0 || device >= device_count()) return 0.0;
  const auto& streams = clocks_[static_cast<size_t>(device)];
  return *std::max_element(streams.begin(), streams.end());
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
  // The copy runs on the stream of the device that issues it: the destination for h2d and peer
  // (PyTorch copies on the destination's stream), the source for d2h.
  const int device = kind == CopyKind::d2h ? src_device : dst_device;
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
  double& c = clock(device, stream);
  const double start = c;
  c += seconds;
  emit(EventKind::copy, copy_kind_name(kind), device, stream, start, seconds, bytes, 0);
}

void SimBackend::memset(int device, void* ptr, int value, size_t bytes, int stream) {
  if (bytes > 0) std::memset(ptr, value, bytes);
  account_kernel(device, stream, "memset", KernelCost{0, static_cast<double>(bytes), DType::u8});
}

void SimBackend::account_kernel(int device, int stream, const char* name,
                                const KernelCost& cost) {
  const double seconds = model_kernel_seconds(device_spec(device), cost);
  double& c = clock(device, stream);
  const double start = c;
  c += seconds;
  emit(EventKind::kernel, name, device, stream, start, seconds, static_cast<uint64_t>(cost.bytes),
       cost.flops);
}

std::unique_ptr<Backend> make_sim_backend(const Topology& topology, TraceBus* trace) {
  return std::make_unique<SimBackend>(topology, trace);
}

}  // namespace furnace
