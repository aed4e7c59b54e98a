// furnace/backend.h: the one small interface every execution backend fills.
// `sim` executes on the CPU and stamps a modelled GPU clock; `cuda` runs on NVIDIA GPUs. No CUDA
// type appears here, so everything above builds with a plain C++ compiler.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "furnace/raw_allocator.h"  // defines: RawAllocator
#include "furnace/dtype.h"
#include "furnace/error.h"     // defines: Error
#include "furnace/process.h"   // defines: Environment
#include "furnace/topology.h"

namespace furnace {

// Under an address-space limit (ulimit -v, RLIMIT_DATA) the simulator refuses a device allocation
// that would leave less than this for the BLAS library: OpenBLAS maps a buffer for each caller on
// demand and, when that mapping fails, retries for ever (a hang). The host-memory guard counts it.
inline constexpr size_t kBlasAddressReserve = size_t{512} << 20;

class TraceBus;
class OpTable;  // furnace/op_table.h: the ops every backend runs

enum class CopyKind : uint8_t { h2d, d2h, d2d, peer };
const char* copy_kind_name(CopyKind k);

// The cost of one kernel, from which the sim backend models its duration.
struct KernelCost {
  double flops = 0;  // floating-point operations
  double bytes = 0;  // bytes read + written in device memory
  DType dtype = DType::f32;
};

// One rank's NCCL communicator on one device (ProcessGroupNCCL's ncclComm_t with its stream): the
// collectives between processes, one process per GPU. Every collective is queued on the
// communicator's own stream (the device's communication stream, ProcessGroup::kCommStream) after an
// event recorded on the caller's `stream` (a logical stream of this backend), so it overlaps what
// the caller queues afterwards; the host does not wait. Before each one a tiny all-reduce of a
// header (what it is, its element count and root, one slot per rank) runs on the same stream; a
// watchdog thread reads it back and aborts the communicator when the ranks called different
// collectives. The watchdog also polls ncclCommGetAsyncError and each collective's end: an error
// or a collective that has not ended within `timeout` aborts the communicator (ncclCommAbort, which
// releases kernels waiting for a dead peer); every later call then throws that one line. An error,
// never a hang.
class RankCommunicator {
 public:
  virtual ~RankCommunicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int device() const = 0;
  // In-place sum over the ranks of `count` f32 elements at device pointer `data`. Returns the
  // collective's number, for stream_wait.
  virtual uint64_t all_reduce_sum_f32(float* data, size_t count, int stream) = 0;
  // Rank `root`'s `count` f32 elements into every rank's `data`.
  virtual uint64_t broadcast_f32(float* data, size_t count, int root, int stream) = 0;
  // `stream` (of this device) runs its later work only after collective `seq` (and every one
  // before it) has ended on the communication stream: cudaStreamWaitEvent, the host does not wait.
  virtual void stream_wait(uint64_t seq, int stream) = 0;
  // Returns once every rank has reached it and every collective queued so far has ended (the
  // host waits, polling; throws on error or timeout).
  virtual void barrier() = 0;
  // This rank gives up: ncclCommAbort; every later call throws a line naming `reason`.
  virtual void abort(const std::string& reason) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- required -------------------------------------------------------------------------
  virtual const char* name() const = 0;              // "sim", "cuda"
  virtual int device_count() const = 0;              // devices this process sees
  virtual const GpuSpec& device_spec(int device) const = 0;
  virtual RawAllocator& raw_allocator(int device) = 0;
  // The ops on this backend's devices (furnace/op_table.h): the ops layer checks, calls one of
  // them, then reports its cost through account_kernel.
  virtual OpTable& op_table() = 0;
  // True when device pointers can be read by the CPU (the simulator, whose device memory is host
  // memory): the collectives then model copies whose bytes they need not move (model_copy).
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
  // True where device time is modelled (the simulator's clock), false where it is measured.
  virtual bool clock_is_modelled() const { return false; }
  // Device time in seconds (modelled for sim): the latest end of any stream on `device`.
  virtual double device_time(int /*device*/) const { return 0; }
  // Modelled seconds `device` has been busy so far: its kernels and copies, a peer copy counting on
  // both ends (sim); 0 where nothing is modelled. DataParallel's per-device breakdown reads it.
  virtual double device_busy_time(int /*device*/) const { return 0; }
  virtual void synchronize(int /*device*/) {}
  // Puts a copy on the modelled clock and in the trace, as copy() would, without moving its bytes,
  // and returns true; false where nothing is modelled (a real device moves bytes in copy()). The
  // simulator's reduce-add models its copies this way and reads the sources in place.
  virtual bool model_copy(CopyKind /*kind*/, int /*dst_device*/, int /*src_device*/,
                          size_t /*bytes*/, int /*stream*/, bool /*pinned*/) {
    return false;
  }

  // Puts `seconds` of a collective between ranks ("all_reduce", "broadcast": NCCL's kernels) on
  // the modelled clock of (device, stream), starting no earlier than `not_before_s` (when the last
  // rank arrived), and in the trace, and returns true; false where nothing is modelled (a real
  // device measures its collectives). ProcessGroup calls it on every rank (process_group.h).
  virtual bool model_collective(int /*device*/, int /*stream*/, const char* /*name*/,
                                double /*not_before_s*/, double /*seconds*/, size_t /*bytes*/) {
    return false;
  }
  // The modelled clock of one stream of `device`: when the work queued on it so far ends (sim); 0
  // where nothing is modelled. DDP's buckets read the compute stream's when their gradients are ready.
  virtual double stream_time(int /*device*/, int /*stream*/) const { return 0; }
  // cudaStreamWaitEvent on the modelled clock: later work on (device, stream) starts no earlier
  // than `until_s` (a collective's end on the communication stream). Nothing where unmodelled.
  virtual void model_stream_wait(int /*device*/, int /*stream*/, double /*until_s*/) {}
  // The host gives (device, stream) its next work no earlier than `host_s` on the modelled clock
  // (it was loading the batch): the stream idles until then, and the trace shows the wait.
  // Returns the seconds it idled; 0 where nothing is modelled (a real GPU simply waits).
  virtual double model_host_wait(int /*device*/, int /*stream*/, double /*host_s*/) { return 0; }
  // ---- collectives (optional) -----------------------------------------------------------------
  // Collectives over this process's devices (NCCL on the cuda backend), queued on each device's
  // `stream`. collectives_available says whether they run over `devices` (distinct, at least two)
  // for `dtype`; where not (the simulator, cuda without NCCL) the caller uses peer copies, as
  // torch.cuda.comm does without NCCL, and the two calls below return false without doing
  // anything. buffers[i] lives on devices[i]; every buffer holds `count` elements of `dtype`.
  virtual bool collectives_available(const std::vector<int>& /*devices*/, DType /*dtype*/) const {
    return false;
  }
  // broadcast: buffers[root]'s contents into every other buffer.
  virtual bool broadcast(const std::vector<void*>& /*buffers*/, const std::vector<int>& /*devices*/,
                         int /*root*/, size_t /*count*/, DType /*dtype*/, int /*stream*/) {
    return false;
  }
  // reduce_sum: `result` (on devices[root]) = the elementwise sum of every buffer; result may be
  // buffers[root] itself. The order of the additions is the library's.
  virtual bool reduce_sum(void* /*result*/, const std::vector<const void*>& /*buffers*/,
                          const std::vector<int>& /*devices*/, int /*root*/, size_t /*count*/,
                          DType /*dtype*/, int /*stream*/) {
    return false;
  }

  // ---- collectives between processes (optional) ----------------------------------------------
  // ncclGetUniqueId: the bytes rank 0 hands every rank (through the store) to make a communicator.
  // Default: this backend has no NCCL (one line saying so).
  virtual std::vector<char> comm_unique_id() {
    throw Error(std::string("this backend (") + name() + ") has no NCCL: collectives between processes on it go through "
                "Gloo (--backend sim); NCCL needs the cuda backend built with NCCL");
  }
  // ncclCommInitRank on `device` as `rank` of `nranks`, from rank 0's `id`; every rank calls it
  // (it returns once all have, or throws after `timeout`). Default: as comm_unique_id.
  virtual std::unique_ptr<RankCommunicator> make_rank_communicator(const std::vector<char>& /*id*/, int /*rank*/,
                                                                   int /*nranks*/, int /*device*/,
                                                                   std::chrono::milliseconds /*timeout*/) {
    comm_unique_id();
    return nullptr;
  }

  // ---- the process's view of the machine (optional) -----------------------------------------
  // The first device use in this process (cuInit, PyTorch's lazy init): a backend whose devices
  // depend on the process's environment (CUDA_VISIBLE_DEVICES) fixes them here; until then its
  // device_count() follows the current environment. Runtime calls it before any device call other
  // than device_count(). Default: the devices were fixed at construction.
  virtual void initialize() {}
  virtual bool initialized() const { return true; }
  // The process starts working on `device` (cudaSetDevice): its CUDA context is created there the
  // first time. Default: nothing to do.
  virtual void use_device(int /*device*/) {}
  // nvidia-smi's number (PCI bus order) of logical device `device`; -1 when unknown.
  virtual int physical_index(int device) const { return device; }
  // The visibility this process's first device use froze (CUDA_VISIBLE_DEVICES read against the
  // machine, with the reasons), where the backend read it itself (the simulator); nullopt where
  // the driver did (cuda: only physical_index() is known) or before initialize().
  virtual std::optional<Visibility> frozen_visibility() const { return std::nullopt; }
  // One line for messages: which GPUs this process sees and why ("this process sees 2 of the 4
  // GPUs of 'workstation-4x3090': cuda:0 = GPU 2, cuda:1 = GPU 3 (CUDA_VISIBLE_DEVICES=2,3)").
  // (Inline on purpose: a Backend member defined out of line would become its key function and
  // tie its typeinfo to libfurnace_runtime, which libfurnace_cuda is linked before.)
  virtual std::string describe_devices() const {
    const int n = device_count();
    return "this process sees " + std::to_string(n) + " device" + (n == 1 ? "" : "s");
  }
};

// The sim backend for the GPUs of `topology`, all visible, reporting to `trace` (may be null).
// A private machine: every GPU in topology (PCI bus) order, as with CUDA_DEVICE_ORDER=PCI_BUS_ID,
// a CUDA context on each from the start. Several processes on one machine: furnace/sim_machine.h.
std::unique_ptr<Backend> make_sim_backend(const Topology& topology, TraceBus* trace);

// Backends by name: "sim", and "cuda" where it was built. `topology` drives the simulator.
std::vector<std::string> available_backends();   // built backends, "cuda" first, "sim" last
// What --backend auto means: $FURNACE_BACKEND when set ("sim" or "cuda"), else "cuda" where it was
// built and a CUDA device is present, else "sim". Anything other than "auto" comes back unchanged.
std::string resolve_backend_name(const std::string& name);
bool cuda_backend_built();
// $FURNACE_NCCL for the cuda backend's DataParallel collectives: unset, empty or "1" uses NCCL
// where it was built, "0" peer copies; anything else is an error (a typo such as "off" would
// otherwise leave NCCL on without a word).
bool nccl_requested();
// True where the cuda backend was built with NCCL (FURNACE_WITH_NCCL): its RankCommunicator exists.
bool nccl_built();
int cuda_device_count();  // real CUDA devices; 0 when not built or no driver/device
std::unique_ptr<Backend> make_backend(const std::string& name, const Topology& topology,
                                      TraceBus* trace);
// The same for one process with environment `env` (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER;
// absent = not set). "sim": that process alone on a simulated `topology`, seeing the GPUs `env`
// makes visible, fixed at its first device use. "cuda": the real driver reads the real
// environment, so the variables present in `env` are exported first (they take effect only if
// CUDA is not initialised yet; variables absent from `env` are left as they are).
std::unique_ptr<Backend> make_backend(const std::string& name, const Topology& topology,
                                      TraceBus* trace, const Environment& env);
// What make_backend(name, topology, trace, env) will run on, with its side effect: "cuda" or
// "auto" exports `env` first, as make_backend does, so the device count auto reads is the one the
// run will see. For a line that names the machine before the run starts.
std::string resolve_backend_name(const std::string& name, const Environment& env);

// On a real machine: the physical GPUs from NVML (PCI order, CUDA_VISIBLE_DEVICES ignored) and
// the CUDA runtime's logical devices, matched by UUID, else by PCI bus id.
struct HardwareDevices {
  bool nvml_available = false;
  std::string nvml_error;                 // why not
  std::vector<GpuSpec> physical;          // NVML index order
  std::vector<uint64_t> physical_used;    // bytes in use on each, all processes (NVML)
  std::vector<int> physical_utilization;  // percent; -1 unknown
  bool cuda_available = false;
  std::string cuda_error;                 // why not ("this build has no CUDA backend", ...)
  std::vector<GpuSpec> logical;           // cuda:0.. as the CUDA runtime enumerates them
  std::vector<int> logical_to_physical;   // index into `physical`; -1 when unmatched
};
HardwareDevices discover_hardware_devices();

// Modelled durations, shared by the sim backend and the tests.
double model_kernel_seconds(const GpuSpec& gpu, const KernelCost& cost);
double model_copy_seconds(double bytes, double bandwidth, double latency_s);
// A collective over the ring of GPUs `ring` (topology indices, in rank order; the last sends to
// the first), as NCCL's ring algorithm runs it: every link carries its share at once, so the
// slowest link of the ring sets the pace. all_reduce: 2(n-1) steps (reduce-scatter, then
// all-gather), each moving bytes/n over every link. broadcast: the buffer pipelined along the
// chain from the root, bytes over the slowest link plus one latency per hop. One GPU: 0.
double model_ring_all_reduce_seconds(const Topology& topology, const std::vector<int>& ring, double bytes);
double model_ring_broadcast_seconds(const Topology& topology, const std::vector<int>& ring, double bytes);

}  // namespace furnace
