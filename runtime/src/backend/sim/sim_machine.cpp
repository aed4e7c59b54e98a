// sim_machine.cpp: a simulated machine shared by processes, and one process's view of it.
//
// [SECTION] the machine: memory and busy time per physical GPU, nvidia-smi's view
// [SECTION] ProcessBackend: one process's devices (its visible GPUs as cuda:0..n-1)
//
// A ProcessBackend fixes its devices at the process's first device use (Process::initialize):
// it then builds a SimBackend over a topology holding only the visible GPUs in logical order
// (links renumbered), so the clocks, copies and kernels are the ordinary simulator's, while
// memory goes through the machine, shared with the other processes.
//
// Modelling choices: a process's CUDA context on a GPU is created by its first cudaSetDevice,
// cudaMalloc or cudaMemGetInfo there (CUDA 12 creates the primary context in cudaSetDevice;
// PyTorch's lazy init alone creates none); nvidia-smi's per-process memory is that context plus
// the segments the process's caching allocator reserved; GPU-Util is kernel time only (copy
// engines do not count), summed over processes and capped at 100%.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "backend/sim/host_pages.h"        // defines: map_host_pages
#include "backend/sim/sim_backend.h"       // defines: SimBackend
#include "backend/sim/sim_machine_impl.h"  // defines: SimMachine::Impl
#include "furnace/error.h"                 // defines: FURNACE_CHECK
#include "furnace/op_table.h"              // defines: OpTable, cpu_op_table
#include "furnace/trace.h"

namespace furnace {
namespace {

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

// ---- [SECTION] the machine ------------------------------------------------------------------

SimMachine::Impl::Impl(Topology t) : topology(std::move(t)), gpus(topology.gpus.size()) {
  FURNACE_CHECK(!topology.gpus.empty()) << "topology '" << topology.name << "' has no GPUs";
}

void SimMachine::Impl::ensure_context(int gpu, int pid) {
  std::lock_guard<std::mutex> lock(mu);
  Gpu& g = gpus.at(static_cast<size_t>(gpu));
  Use& u = g.by_pid[pid];
  if (u.context) return;
  const GpuSpec& spec = topology.gpus[static_cast<size_t>(gpu)];
  FURNACE_CHECK_DEVICE(spec.memory_bytes - g.used >= spec.context_bytes, gpu)
      << "CUDA error: out of memory (creating the CUDA context of process " << pid << " on GPU "
      << gpu << " needs " << mib(spec.context_bytes) << "; " << mib(spec.memory_bytes - g.used)
      << " of " << mib(spec.memory_bytes) << " are free)";
  u.context = spec.context_bytes;
  g.used += spec.context_bytes;
}

uint64_t SimMachine::Impl::context_of(int gpu, int pid) const {
  std::lock_guard<std::mutex> lock(mu);
  const Gpu& g = gpus.at(static_cast<size_t>(gpu));
  auto it = g.by_pid.find(pid);
  return it == g.by_pid.end() ? 0 : it->second.context;
}

void* SimMachine::Impl::malloc(int gpu, int pid, size_t bytes) {
  ensure_context(gpu, pid);  // cudaMalloc creates the context on a device that has none
  std::lock_guard<std::mutex> lock(mu);
  Gpu& g = gpus.at(static_cast<size_t>(gpu));
  const uint64_t capacity = topology.gpus[static_cast<size_t>(gpu)].memory_bytes;
  if (bytes == 0 || bytes > capacity - g.used) return nullptr;  // cudaErrorMemoryAllocation
  void* p = map_host_pages(bytes, topology.gpus[static_cast<size_t>(gpu)].name);
  g.used += bytes;
  g.by_pid[pid].reserved += bytes;
  return p;
}

void SimMachine::Impl::free(int gpu, int pid, void* ptr, size_t bytes) {
  if (!ptr) return;
  unmap_host_pages(ptr, bytes);
  std::lock_guard<std::mutex> lock(mu);
  Gpu& g = gpus.at(static_cast<size_t>(gpu));
  g.used -= bytes;
  g.by_pid[pid].reserved -= bytes;
}

void SimMachine::Impl::mem_get_info(int gpu, size_t* free_bytes, size_t* total_bytes) const {
  std::lock_guard<std::mutex> lock(mu);
  const uint64_t capacity = topology.gpus.at(static_cast<size_t>(gpu)).memory_bytes;
  *total_bytes = capacity;
  *free_bytes = capacity - gpus[static_cast<size_t>(gpu)].used;
}

void SimMachine::Impl::record_kernel(int gpu, double seconds, double end_s) {
  std::lock_guard<std::mutex> lock(mu);
  Gpu& g = gpus.at(static_cast<size_t>(gpu));
  g.busy_s += seconds;
  g.end_s = std::max(g.end_s, end_s);
}

void SimMachine::Impl::exit(int pid) {
  std::lock_guard<std::mutex> lock(mu);
  for (Gpu& g : gpus) {
    auto it = g.by_pid.find(pid);
    if (it == g.by_pid.end()) continue;
    g.used -= it->second.context + it->second.reserved;
    g.by_pid.erase(it);
  }
}

const std::string& SimMachine::Impl::process_name(int pid) const {
  for (const auto& p : processes)
    if (p->pid() == pid) return p->name();
  static const std::string unknown = "?";
  return unknown;
}

SimMachine::SimMachine(Topology topology) : impl_(std::make_unique<Impl>(std::move(topology))) {}
SimMachine::~SimMachine() = default;

const Topology& SimMachine::topology() const { return impl_->topology; }

Process& SimMachine::spawn(std::string name, Environment env) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->processes.push_back(std::make_unique<Process>(impl_->next_pid++, std::move(name),
                                                       std::move(env), impl_->topology.gpus));
  return *impl_->processes.back();
}

SmiSnapshot SimMachine::smi() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  SmiSnapshot s;
  s.topology = impl_->topology.name;
  for (const Impl::Gpu& g : impl_->gpus) s.window_s = std::max(s.window_s, g.end_s);
  for (size_t i = 0; i < impl_->gpus.size(); ++i) {
    const Impl::Gpu& g = impl_->gpus[i];
    const GpuSpec& spec = impl_->topology.gpus[i];
    SmiGpu row;
    row.index = static_cast<int>(i);
    row.name = spec.name;
    row.uuid = spec.uuid;
    row.pci_bus_id = spec.pci_bus_id;
    row.total_bytes = spec.memory_bytes;
    row.utilization_percent =
        s.window_s > 0 ? static_cast<int>(std::min(100.0, 100.0 * g.busy_s / s.window_s) + 0.5) : 0;
    for (const auto& [pid, use] : g.by_pid) {
      if (use.context + use.reserved == 0) continue;
      row.processes.push_back({pid, impl_->process_name(pid), use.context + use.reserved,
                               use.context, use.reserved});
      row.used_bytes += use.context + use.reserved;
    }
    s.gpus.push_back(std::move(row));
  }
  return s;
}

// ---- [SECTION] ProcessBackend ---------------------------------------------------------------

namespace {

// Raw memory of one logical device of one process: the machine's physical GPU, shared.
class SharedDeviceMemory : public RawAllocator {
 public:
  SharedDeviceMemory(SimMachine::Impl& m, int gpu, int pid) : m_(m), gpu_(gpu), pid_(pid) {}
  void* raw_malloc(size_t bytes) override { return m_.malloc(gpu_, pid_, bytes); }
  void raw_free(void* ptr, size_t bytes) override { m_.free(gpu_, pid_, ptr, bytes); }
  void mem_get_info(size_t* free_bytes, size_t* total_bytes) override {
    m_.ensure_context(gpu_, pid_);  // cudaMemGetInfo runs in a context
    m_.mem_get_info(gpu_, free_bytes, total_bytes);
  }
  size_t process_overhead_bytes() override { return m_.context_of(gpu_, pid_); }

 private:
  SimMachine::Impl& m_;
  int gpu_, pid_;
};

class ProcessBackend : public Backend {
 public:
  ProcessBackend(std::unique_ptr<SimMachine> owned, SimMachine& machine, Process& process,
                 TraceBus* trace)
      : owned_(std::move(owned)), m_(machine.impl()), process_(process), trace_(trace) {}

  ~ProcessBackend() override {
    inner_.reset();
    memory_.clear();
    m_.exit(process_.pid());
  }

  const char* name() const override { return "sim"; }
  int device_count() const override {
    return initialized() ? static_cast<int>(physical_.size()) : process_.visibility().count();
  }
  const GpuSpec& device_spec(int device) const override { return ready(device).device_spec(device); }
  RawAllocator& raw_allocator(int device) override {
    ready(device);
    return *memory_[static_cast<size_t>(device)];
  }
  // The CPU kernels on device memory that is host memory; the cost model is behind account_kernel.
  OpTable& op_table() override { return cpu_op_table(); }
  bool clock_is_modelled() const override { return true; }
  bool host_accessible() const override { return true; }
  void copy(CopyKind kind, void* dst, int dst_device, const void* src, int src_device,
            size_t bytes, int stream, bool pinned) override {
    ready(kind == CopyKind::h2d ? dst_device : src_device);
    inner_->copy(kind, dst, dst_device, src, src_device, bytes, stream, pinned);
  }
  bool model_copy(CopyKind kind, int dst_device, int src_device, size_t bytes, int stream,
                  bool pinned) override {
    ready(kind == CopyKind::h2d ? dst_device : src_device);
    return inner_->model_copy(kind, dst_device, src_device, bytes, stream, pinned);
  }
  void memset(int device, void* ptr, int value, size_t bytes, int stream) override {
    ready(device).memset(device, ptr, value, bytes, stream);
  }
  bool model_collective(int device, int stream, const char* name, double not_before_s,
                        double seconds, size_t bytes) override {
    SimBackend& b = ready(device);
    b.model_collective(device, stream, name, not_before_s, seconds, bytes);
    m_.record_kernel(physical_[static_cast<size_t>(device)], seconds, b.device_time(device));
    return true;
  }
  double model_host_wait(int device, int stream, double host_s) override {
    return ready(device).model_host_wait(device, stream, host_s);  // idle: nothing for smi's load
  }
  void account_kernel(int device, int stream, const char* name, const KernelCost& cost) override {
    SimBackend& b = ready(device);
    b.account_kernel(device, stream, name, cost);
    m_.record_kernel(physical_[static_cast<size_t>(device)],
                     model_kernel_seconds(b.device_spec(device), cost), b.device_time(device));
  }
  double device_time(int device) const override {
    return inner_ && device >= 0 && device < device_count() ? inner_->device_time(device) : 0.0;
  }
  double stream_time(int device, int stream) const override {
    return inner_ && device >= 0 && device < device_count() ? inner_->stream_time(device, stream) : 0.0;
  }
  void model_stream_wait(int device, int stream, double until_s) override {
    ready(device).model_stream_wait(device, stream, until_s);
  }
  double device_busy_time(int device) const override {
    return inner_ && device >= 0 && device < device_count() ? inner_->device_busy_time(device) : 0.0;
  }
  void synchronize(int device) override { ready(device).synchronize(device); }

  void initialize() override {
    if (initialized()) return;
    std::lock_guard<std::mutex> lock(init_mutex_);
    if (initialized()) return;
    const Visibility v = process_.initialize();
    Topology sub;  // the visible GPUs in logical order, links renumbered
    sub.name = m_.topology.name;
    sub.description = m_.topology.description;
    sub.source = m_.topology.source;
    sub.host = m_.topology.host;
    for (const VisibleDevice& d : v.devices) {
      physical_.push_back(d.physical_index);
      sub.gpus.push_back(m_.topology.gpus[static_cast<size_t>(d.physical_index)]);
      memory_.push_back(std::make_unique<SharedDeviceMemory>(m_, d.physical_index, process_.pid()));
    }
    for (const LinkSpec& l : m_.topology.links) {
      auto a = std::find(physical_.begin(), physical_.end(), l.a);
      auto b = std::find(physical_.begin(), physical_.end(), l.b);
      if (a == physical_.end() || b == physical_.end()) continue;
      LinkSpec r = l;
      r.a = static_cast<int>(a - physical_.begin());
      r.b = static_cast<int>(b - physical_.begin());
      sub.links.push_back(r);
    }
    if (!sub.gpus.empty()) inner_ = std::make_unique<SimBackend>(sub, trace_);
    initialized_.store(true, std::memory_order_release);
  }
  bool initialized() const override { return initialized_.load(std::memory_order_acquire); }
  void use_device(int device) override {
    ready(device);
    m_.ensure_context(physical_[static_cast<size_t>(device)], process_.pid());
  }
  int physical_index(int device) const override {
    return initialized() && device >= 0 && device < device_count()
               ? physical_[static_cast<size_t>(device)]
               : -1;
  }
  std::optional<Visibility> frozen_visibility() const override {
    if (!initialized()) return std::nullopt;
    return process_.visibility();
  }
  std::string describe_devices() const override {
    const Visibility v = process_.visibility();
    const int n = static_cast<int>(m_.topology.gpus.size());
    std::string s = "process " + std::to_string(process_.pid()) + " sees ";
    if (v.count() == 0) {
      s += "no GPU of '" + m_.topology.name + "' (it has " + std::to_string(n) + ")";
    } else {
      if (v.count() == n) {
        s += n == 1 ? std::string("the 1 GPU") : "all " + std::to_string(n) + " GPUs";
      } else {
        s += std::to_string(v.count()) + " of the " + std::to_string(n) + " GPUs";
      }
      s += " of '" + m_.topology.name + "': " + v.mapping_text();
    }
    s += "; " + describe_cuda_environment(process_.environment()) +
         (process_.initialized() ? " (read at its first device use)" : "");
    return s;
  }

 private:
  // Initialises on first use and checks the ordinal; returns the simulator running the devices.
  SimBackend& ready(int device) const {
    const_cast<ProcessBackend*>(this)->initialize();
    FURNACE_CHECK(device >= 0 && device < static_cast<int>(physical_.size()))
        << "CUDA error: invalid device ordinal (cuda:" << device << ": " << describe_devices() << ")";
    return *inner_;
  }

  std::unique_ptr<SimMachine> owned_;  // a private machine (make_backend with an environment)
  SimMachine::Impl& m_;
  Process& process_;
  TraceBus* trace_;
  std::mutex init_mutex_;
  std::atomic<bool> initialized_{false};
  std::vector<int> physical_;  // logical -> physical, fixed at initialize()
  std::vector<std::unique_ptr<SharedDeviceMemory>> memory_;
  std::unique_ptr<SimBackend> inner_;
};

}  // namespace

std::unique_ptr<Backend> SimMachine::attach(Process& process, TraceBus* trace) {
  return std::make_unique<ProcessBackend>(nullptr, *this, process, trace);
}

std::unique_ptr<Backend> make_sim_process_backend(const Topology& topology, TraceBus* trace,
                                                  const Environment& env) {
  auto machine = std::make_unique<SimMachine>(topology);
  SimMachine& m = *machine;
  Process& p = m.spawn("furnace", env);
  return std::make_unique<ProcessBackend>(std::move(machine), m, p, trace);
}

}  // namespace furnace
