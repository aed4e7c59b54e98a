// furnace/backend.h: the one small interface every execution backend fills.
// `sim` executes on the CPU and stamps a modelled GPU clock; `cuda` runs on NVIDIA GPUs. No CUDA
// type appears here, so everything above builds with a plain C++ compiler.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "furnace/allocator.h"
#include "furnace/dtype.h"
#include "furnace/topology.h"

namespace furnace {

class TraceBus;

enum class CopyKind : uint8_t { h2d, d2h, d2d, peer };
const char* copy_kind_name(CopyKind k);

// The cost of one kernel, from which the sim backend models its duration.
struct KernelCost {
  double flops = 0;  // floating-point operations
  double bytes = 0;  // bytes read + written in device memory
  DType dtype = DType::f32;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- required -------------------------------------------------------------------------
  virtual const char* name() const = 0;              // "sim", "cuda"
  virtual int device_count() const = 0;              // devices this process sees
  virtual const GpuSpec& device_spec(int device) const = 0;
  virtual RawAllocator& raw_allocator(int device) = 0;
  // True when device pointers can be read by the CPU (the simulator): the ops layer then runs
  // its CPU implementations on them directly.
  virtual bool host_accessible() const = 0;
  // Copies `bytes`; `pinned` says the host side is page-locked (faster, truly asynchronous).
  virtual void copy(CopyKind kind, void* dst, int dst_device, const void* src, int src_device,
                    size_t bytes, int stream, bool pinned) = 0;
  virtual void memset(int device, void* ptr, int value, size_t bytes, int stream) = 0;

  // ---- optional, with defaults ------------------------------------------------------------
  // Called after an op ran on `device`/`stream`: the sim backend advances its modelled clock and
  // emits a kernel event; a real backend records nothing here (it measures with events).
  virtual void account_kernel(int /*device*/, int /*stream*/, const char* /*name*/,
                              const KernelCost& /*cost*/) {}
  // Device time in seconds (modelled for sim): the latest end of any stream on `device`.
  virtual double device_time(int /*device*/) const { return 0; }
  // Modelled seconds `device` has been busy so far: its kernels and copies, a peer copy counting on
  // both ends (sim); 0 where nothing is modelled. DataParallel's per-device breakdown reads it.
  virtual double device_busy_time(int /*device*/) const { return 0; }
  virtual void synchronize(int /*device*/) {}
};

// The sim backend for the GPUs of `topology`, all visible, reporting to `trace` (may be null).
std::unique_ptr<Backend> make_sim_backend(const Topology& topology, TraceBus* trace);

// Backends by name: "sim", and "cuda" where it was built. `topology` drives the simulator.
std::vector<std::string> available_backends();   // built backends, "cuda" first, "sim" last
bool cuda_backend_built();
int cuda_device_count();  // real CUDA devices; 0 when not built or no driver/device
std::unique_ptr<Backend> make_backend(const std::string& name, const Topology& topology,
                                      TraceBus* trace);

// Modelled durations, shared by the sim backend and the tests.
double model_kernel_seconds(const GpuSpec& gpu, const KernelCost& cost);
double model_copy_seconds(double bytes, double bandwidth, double latency_s);

}  // namespace furnace
