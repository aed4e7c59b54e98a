// backend/sim: the simulated GPUs. Memory is host memory reserved lazily (mmap, so a simulated
// 80 GB device costs nothing until touched) and capped at the topology's capacity less the
// modelled CUDA context; ops run on the CPU; every kernel and copy advances a modelled clock per
// (device, stream) and is reported to the TraceBus.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "furnace/backend.h"
#include "furnace/op_table.h"  // defines: OpTable, cpu_op_table
#include "furnace/trace.h"

namespace furnace {

// Device memory of one simulated GPU, shared by every process on the machine in later scenarios.
class SimDeviceMemory : public RawAllocator {
 public:
  explicit SimDeviceMemory(const GpuSpec& spec) : spec_(spec) {}
  ~SimDeviceMemory() override;
  void* raw_malloc(size_t bytes) override;
  void raw_free(void* ptr, size_t bytes) override;
  void mem_get_info(size_t* free_bytes, size_t* total_bytes) override;
  size_t process_overhead_bytes() override { return spec_.context_bytes; }
  size_t used_bytes() const { return used_; }

 private:
  const GpuSpec& spec_;
  size_t used_ = 0;
};

class SimBackend : public Backend {
 public:
  SimBackend(const Topology& topology, TraceBus* trace);
  ~SimBackend() override;

  const char* name() const override { return "sim"; }
  int device_count() const override { return static_cast<int>(topology_.gpus.size()); }
  const GpuSpec& device_spec(int device) const override;
  RawAllocator& raw_allocator(int device) override;
  // The CPU kernels on device memory that is host memory; the cost model is behind account_kernel.
  OpTable& op_table() override { return cpu_op_table(); }
  bool clock_is_modelled() const override { return true; }
  bool host_accessible() const override { return true; }
  void copy(CopyKind kind, void* dst, int dst_device, const void* src, int src_device,
            size_t bytes, int stream, bool pinned) override;
  void memset(int device, void* ptr, int value, size_t bytes, int stream) override;
  void account_kernel(int device, int stream, const char* name, const KernelCost& cost) override;
  double device_time(int device) const override;
  double device_busy_time(int device) const override;
  bool model_copy(CopyKind kind, int dst_device, int src_device, size_t bytes, int stream,
                  bool pinned) override;
  bool model_collective(int device, int stream, const char* name, double not_before_s,
                        double seconds, size_t bytes) override;
  double stream_time(int device, int stream) const override;
  void model_stream_wait(int device, int stream, double until_s) override;
  double model_host_wait(int device, int stream, double host_s) override;

  const Topology& topology() const { return topology_; }

 private:
  // Runs `seconds` of work on (device, stream), starting no earlier than `not_before`; returns
  // the start. Thread-safe: DataParallel's workers drive different devices at once.
  double advance(int device, int stream, double not_before, double seconds);
  void emit(EventKind kind, const char* name, int device, int stream, double start, double dur,
            uint64_t bytes, double flops);

  Topology topology_;
  TraceBus* trace_;
  std::vector<std::unique_ptr<SimDeviceMemory>> memory_;
  // One per device, each behind its own lock (a worker thread per device never contends; the
  // streams vector may grow when a new stream is first used).
  struct DeviceClock {
    mutable std::mutex mutex;
    std::vector<double> streams{0.0};  // [stream] modelled seconds
    double busy = 0;                   // modelled seconds of work, all streams
  };
  std::vector<std::unique_ptr<DeviceClock>> clocks_;
};

}  // namespace furnace
