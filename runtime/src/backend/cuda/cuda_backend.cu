// The CUDA backend, first part: devices as the CUDA runtime enumerates them (after
// CUDA_VISIBLE_DEVICES), their properties as a GpuSpec, raw memory through cudaMalloc, copies and
// memset on per-device streams, cudaMemGetInfo. Ops arrive with the CUDA backend issue; until
// then the ops layer refuses to run them on this backend with a clear message.
#include "backend/cuda/cuda_backend.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace furnace::cuda {
namespace {

// Makes `device` current for the lifetime of the guard, as c10::cuda::CUDAGuard.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FURNACE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) FURNACE_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

class CudaDeviceMemory : public RawAllocator {
 public:
  CudaDeviceMemory(int device, size_t context_bytes) : device_(device), context_(context_bytes) {}
  void* raw_malloc(size_t bytes) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
      return nullptr;
    }
    FURNACE_CUDA_CHECK(err);
    return p;
  }
  void raw_free(void* ptr, size_t) override {
    DeviceGuard g(device_);
    FURNACE_CUDA_CHECK(cudaFree(ptr));
  }
  void mem_get_info(size_t* free_bytes, size_t* total_bytes) override {
    DeviceGuard g(device_);
    FURNACE_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
  }
  size_t process_overhead_bytes() override { return context_; }
  void synchronize() override {
    DeviceGuard g(device_);
    FURNACE_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  int device_;
  size_t context_;
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
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device);
  cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device);
  cudaDeviceGetAttribute(&bus_width, cudaDevAttrGlobalMemoryBusWidth, device);
  // Rough figures for the timing model only; the cuda backend measures real time.
  g.peak_flops_f32 = 2.0 * 128.0 * p.multiProcessorCount * clock_khz * 1e3;
  g.peak_flops_f16 = 8.0 * g.peak_flops_f32;
  g.peak_flops_bf16 = g.peak_flops_f16;
  g.memory_bandwidth = 2.0 * mem_clock_khz * 1e3 * (bus_width / 8.0);
  g.launch_latency_s = 5e-6;
  return g;
}

class CudaBackend : public Backend {
 public:
  CudaBackend(TraceBus* trace, std::vector<int> physical) : trace_(trace), physical_(std::move(physical)) {
    int n = device_count();
    for (int d = 0; d < n; ++d) {
      specs_.push_back(spec_from_properties(d));
      memory_.push_back(std::make_unique<CudaDeviceMemory>(d, 0));
    }
  }
  // cudaSetDevice creates the device's primary context (CUDA 12 and later).
  void use_device(int device) override { FURNACE_CUDA_CHECK(cudaSetDevice(device)); }
  int physical_index(int device) const override {
    return device >= 0 && static_cast<size_t>(device) < physical_.size() ? physical_[device] : -1;
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
  const char* name() const override { return "cuda"; }
  int device_count() const override { return static_cast<int>(specs_.size()); }
  const GpuSpec& device_spec(int device) const override { return specs_.at(device); }
  RawAllocator& raw_allocator(int device) override { return *memory_.at(device); }
  bool host_accessible() const override { return false; }
  void copy(CopyKind kind, void* dst, int dst_device, const void* src, int src_device,
            size_t bytes, int /*stream*/, bool /*pinned*/) override {
    switch (kind) {
      case CopyKind::h2d: {
        DeviceGuard g(dst_device);
        FURNACE_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
        break;
      }
      case CopyKind::d2h: {
        DeviceGuard g(src_device);
        FURNACE_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
        break;
      }
      case CopyKind::d2d: {
        DeviceGuard g(dst_device);
        FURNACE_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
        break;
      }
      case CopyKind::peer: {
        DeviceGuard g(dst_device);
        FURNACE_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device, src, src_device, bytes));
        break;
      }
    }
  }
  void memset(int device, void* ptr, int value, size_t bytes, int /*stream*/) override {
    DeviceGuard g(device);
    FURNACE_CUDA_CHECK(cudaMemset(ptr, value, bytes));
  }
  void synchronize(int device) override {
    DeviceGuard g(device);
    FURNACE_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
  TraceBus* trace_;
  std::vector<int> physical_;
  std::vector<GpuSpec> specs_;
  std::vector<std::unique_ptr<CudaDeviceMemory>> memory_;
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

std::vector<GpuSpec> logical_devices(std::string* error) {
  std::vector<GpuSpec> out;
  int n = 0;
  if (cudaError_t err = cudaGetDeviceCount(&n); err != cudaSuccess) {
    if (error) *error = std::string("CUDA error: ") + cudaGetErrorString(err);
    cudaGetLastError();
    return out;
  }
  for (int d = 0; d < n; ++d) out.push_back(spec_from_properties(d));
  return out;
}

}  // namespace furnace::cuda
