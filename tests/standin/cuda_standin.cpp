// tests/standin/cuda_standin.cpp: a stand-in for the NVIDIA driver stack (CUDA runtime, cuBLAS and
// NVML), built by the test suite as libfurnace_cuda_standin.so and LD_PRELOADed into the real
// `furnace` (or into a test) so that the CUDA backend's host side runs on a machine without a GPU:
// device discovery, the CUDA_VISIBLE_DEVICES mapping, the driver errors, out of memory at
// cudaMalloc. It is NOT a GPU: device memory is host memory, copies are memcpy, streams and events
// are host-synchronous (though a query may be told to answer "not ready" first; and work behind a
// collective of the NCCL stand-in waits for it, copies included), and no kernel or
// GEMM runs (a launch fails with cudaErrorNotSupported and a
// line on stderr). Nothing measured under it is a GPU result.
//
// It exports every cudart / cuBLAS symbol the cuda backend imports (`nm -D --undefined-only
// furnace`; the test StandinRuntime.CoversEveryCudaSymbolFurnaceImports checks it) and the NVML
// calls of machine/nvml.cpp (the build also names it libnvidia-ml.so.1 in the same folder, which
// nvml.cpp's dlopen finds through LD_LIBRARY_PATH). Where the build uses NCCL, the same library
// also stands in for it (nccl_standin.cpp: DataParallel's grouped collectives, their timeout and
// asynchronous errors).
//
// Configured by the environment, read once at the first call (as the driver reads
// CUDA_VISIBLE_DEVICES once, at cuInit):
//   FURNACE_STANDIN_GPUS=N              physical GPUs (default 1; 0: a driver and no GPU)
//   FURNACE_STANDIN_DRIVER=ok|none|old  none: no driver installed (cudaDriverGetVersion gives 0);
//                                       old: a driver older than this runtime (default ok)
//   FURNACE_STANDIN_DRIVER_VERSION=V    what cudaDriverGetVersion reports (default: 13000 for ok,
//                                       12020 for old; 0 for none)
//   FURNACE_STANDIN_NAME=S              every GPU's name (default "NVIDIA H200 (stand-in)")
//   FURNACE_STANDIN_MEMORY_MIB=M        each GPU's memory (default 143771, an H200's)
//   FURNACE_STANDIN_CONTEXT_MIB=C       what a CUDA context takes on a GPU once created (default 500)
//   FURNACE_STANDIN_NOT_READY=Q         work in flight: a recorded event, or a stream given work,
//                                       answers up to Q queries (cudaEventQuery, cudaStreamQuery)
//                                       with cudaErrorNotReady, which the runtime also records as the
//                                       thread's last error, before it is complete; completing it
//                                       completes what came before it on its stream; synchronizing
//                                       completes it at once; cudaEventElapsedTime is not ready until
//                                       both events are complete (default 0: done when queued)
//   FURNACE_STANDIN_EVENT_STEP_S=T      the device clock events read: each cudaEventRecord advances it
//                                       by T seconds (default 0: the host's steady clock), so an hour
//                                       of device time passes in a test
//   CUDA_VISIBLE_DEVICES                integer ordinals and GPU-UUID prefixes, the first invalid
//                                       entry ends the list (semantics.md section 1); an empty
//                                       list: no device (cudaErrorNoDevice)
// GPU i has the UUID GPU-57a4d0e0-0000-4000-8000-0000000000ii and the PCI bus id
// 00000000:(0x18+i):00.0, so tests can name them.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "standin_streams.h"  // declares: furnace_standin::queue_collective, ... (defined here)

#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Gpu {
  std::string name;
  unsigned char uuid[16];
  int pci_bus = 0;
  size_t total = 0;
  size_t used = 0;        // cudaMalloc'ed bytes
  bool context = false;   // a context exists (counted in used memory, as on a real GPU)
};

struct Machine {
  std::once_flag once;
  std::mutex mu;
  enum class Driver { ok, none, old } driver = Driver::ok;
  int driver_version = 13000;
  size_t context_bytes = 500ull << 20;
  std::vector<Gpu> physical;
  std::vector<int> visible;  // logical -> physical
  std::map<void*, std::pair<int, size_t>> allocations;  // ptr -> (logical device, bytes)
  std::map<const void*, std::string> kernels;            // host stub -> device name
  std::atomic<int> not_ready_queries{0};                 // FURNACE_STANDIN_NOT_READY
  std::atomic<long> not_ready_answers{0};                // how often a query answered "not ready"
  double event_step_s = 0;  // FURNACE_STANDIN_EVENT_STEP_S (under InFlight's mutex)
  double event_clock_s = 0; // the device clock when it advances by steps
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

Machine& machine() {
  static Machine* m = new Machine;  // never destroyed: calls may come from other destructors
  return *m;
}

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0) {
    std::fprintf(stderr, "furnace CUDA stand-in: %s='%s' is not a non-negative integer\n", name, v);
    std::exit(2);
  }
  return x;
}

std::string uuid_string(const unsigned char* u) {
  char s[64];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
                u[13], u[14], u[15]);
  return s;
}

// The driver's reading of CUDA_VISIBLE_DEVICES: ordinals or GPU-UUID prefixes (matching exactly one
// GPU), renumbered in list order; the first invalid entry ends the list. (Written apart from
// Furnace's parser on purpose: the tests compare the two.)
std::vector<int> parse_visible(const char* v, const std::vector<Gpu>& gpus) {
  std::vector<int> out;
  const int n = static_cast<int>(gpus.size());
  if (!v) {
    for (int i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  std::string s = v;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    std::string e = s.substr(pos, comma - pos);
    while (!e.empty() && e.front() == ' ') e.erase(e.begin());
    while (!e.empty() && e.back() == ' ') e.pop_back();
    int found = -1;
    if (e.rfind("GPU-", 0) == 0) {
      int matches = 0;
      for (int i = 0; i < n; ++i)
        if (uuid_string(gpus[static_cast<size_t>(i)].uuid).rfind(e, 0) == 0) ++matches, found = i;
      if (matches != 1) found = -1;
    } else if (!e.empty() && std::all_of(e.begin(), e.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const long x = std::strtol(e.c_str(), nullptr, 10);
      if (x < n) found = static_cast<int>(x);
    }
    if (found < 0 || std::find(out.begin(), out.end(), found) != out.end()) break;
    out.push_back(found);
    pos = comma + 1;
  }
  return out;
}

void init_machine(Machine& m) {
  const char* drv = std::getenv("FURNACE_STANDIN_DRIVER");
  const std::string d = drv && *drv ? drv : "ok";
  if (d == "ok") m.driver = Machine::Driver::ok;
  else if (d == "none") m.driver = Machine::Driver::none;
  else if (d == "old") m.driver = Machine::Driver::old;
  else {
    std::fprintf(stderr, "furnace CUDA stand-in: FURNACE_STANDIN_DRIVER='%s' must be ok, none or old\n", drv);
    std::exit(2);
  }
  const long fallback = m.driver == Machine::Driver::ok ? CUDART_VERSION
                        : m.driver == Machine::Driver::old ? 12020 : 0;
  m.driver_version = m.driver == Machine::Driver::none
                         ? 0 : static_cast<int>(env_long("FURNACE_STANDIN_DRIVER_VERSION", fallback));
  m.context_bytes = static_cast<size_t>(env_long("FURNACE_STANDIN_CONTEXT_MIB", 500)) << 20;
  const long gpus = env_long("FURNACE_STANDIN_GPUS", 1);
  const size_t memory = static_cast<size_t>(env_long("FURNACE_STANDIN_MEMORY_MIB", 143771)) << 20;
  const char* name = std::getenv("FURNACE_STANDIN_NAME");
  for (long i = 0; i < gpus; ++i) {
    Gpu g;
    g.name = name && *name ? name : "NVIDIA H200 (stand-in)";
    const unsigned char u[16] = {0x57, 0xa4, 0xd0, 0xe0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0,
                                 static_cast<unsigned char>(i)};
    std::memcpy(g.uuid, u, 16);
    g.pci_bus = 0x18 + static_cast<int>(i);
    g.total = memory;
    m.physical.push_back(g);
  }
  m.visible = parse_visible(std::getenv("CUDA_VISIBLE_DEVICES"), m.physical);
  m.not_ready_queries = static_cast<int>(env_long("FURNACE_STANDIN_NOT_READY", 0));
  if (const char* step = std::getenv("FURNACE_STANDIN_EVENT_STEP_S"); step && *step) {
    char* end = nullptr;
    m.event_step_s = std::strtod(step, &end);
    if (*end != '\0' || !(m.event_step_s >= 0)) {
      std::fprintf(stderr, "furnace CUDA stand-in: FURNACE_STANDIN_EVENT_STEP_S='%s' is not a non-negative number\n", step);
      std::exit(2);
    }
  }
}

// cuInit's answer for this process: success, or why the runtime cannot start.
cudaError_t driver_status() {
  Machine& m = machine();
  std::call_once(m.once, [&] { init_machine(m); });
  if (m.driver != Machine::Driver::ok) return cudaErrorInsufficientDriver;
  if (m.visible.empty()) return cudaErrorNoDevice;
  return cudaSuccess;
}

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

#define STANDIN_INIT()                                 \
  do {                                                 \
    if (cudaError_t e_ = driver_status(); e_ != cudaSuccess) return fail(e_); \
  } while (0)

Gpu& logical(int device) { return machine().physical[static_cast<size_t>(machine().visible[static_cast<size_t>(device)])]; }
bool valid(int device) { return device >= 0 && device < static_cast<int>(machine().visible.size()); }
void touch_context(int device) {
  std::lock_guard<std::mutex> lock(machine().mu);
  logical(device).context = true;
}

// Work in flight, in stream order: a stream numbers what it is given (`queued`); everything up to
// `done` has completed. An event is done once its stream has completed it (the null stream and
// an event never recorded: at once). Before it is, a query answers cudaErrorNotReady, at most
// FURNACE_STANDIN_NOT_READY times (`pending`), then finds the work done; synchronizing completes
// it at once. Completing work completes everything queued before it on the stream, as on a GPU.
// A collective (the NCCL stand-in's) is a barrier in its stream: nothing after it completes
// until it ends, and copies queued behind it run only then (`deferred`), in stream order.
struct Stream {
  int device;
  long queued = 0;
  long done = 0;
  int pending = 0;
  std::deque<long> barriers;  // positions of collectives not ended yet, in order
  std::deque<std::pair<long, std::function<void()>>> deferred;  // work queued behind one
};
struct Event {
  int device;
  double at_s = 0;  // when it completed on the stand-in's device clock
  bool recorded = false;
  Stream* stream = nullptr;  // where it was last recorded (nullptr: the null stream)
  long position = 0;         // its place in that stream's work
  int pending = 0;
};

// The live streams and events (cudaDeviceSynchronize completes them all; a destroyed stream's
// events are complete); one mutex for all of their fields.
// cudaStreamWaitEvent on an event behind an open collective: the waiting stream holds a barrier
// of its own (at `position`) until the event's stream passes `until`.
struct Dependency {
  Stream* waiting;
  long position;
  Stream* on;
  long until;
};
struct InFlight {
  std::mutex mu;
  std::condition_variable ended;  // a collective ended (synchronizing may have waited for it)
  std::vector<Stream*> streams;
  std::vector<Event*> events;
  std::vector<Dependency> dependencies;
};
InFlight& in_flight() {
  static InFlight* f = new InFlight;  // never destroyed, as machine()
  return *f;
}

// The last position of `s` that can complete: before its first collective not ended yet.
long limit(const Stream& s) { return s.barriers.empty() ? s.queued : s.barriers.front() - 1; }
bool completed(const Event& e) { return !e.stream || e.position <= e.stream->done; }
void complete(Event& e) {
  if (e.stream) e.stream->done = std::max(e.stream->done, std::min(e.position, limit(*e.stream)));
  e.pending = 0;
}
void complete(Stream& s) {
  s.done = std::max(s.done, limit(s));
  s.pending = 0;
}

// Synchronizing work behind a collective waits for it to end, as on a GPU; a minute without it is
// a hang the real runtime would never come back from: said, and the process ends.
template <class Done>
void wait_for(std::unique_lock<std::mutex>& lock, const char* what, Done done) {
  if (!in_flight().ended.wait_for(lock, std::chrono::seconds(60), done)) {
    std::fprintf(stderr, "furnace CUDA stand-in: %s waited 60 s for a collective whose peers never came "
                 "(on a GPU it would wait forever)\n", what);
    std::_Exit(86);
  }
}

// New work on `s` (nullptr, the null stream, is done when it returns). Caller holds the mutex.
long give_work_locked(cudaStream_t s) {
  if (!s) return 0;
  auto* stream = reinterpret_cast<Stream*>(s);
  stream->pending = machine().not_ready_queries.load();
  return ++stream->queued;
}
void give_work(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(in_flight().mu);
  give_work_locked(s);
}
// A copy or memset on `s`: done now, or, behind a collective not ended yet, when it ends.
void run_on_stream(cudaStream_t s, std::function<void()> work) {
  std::lock_guard<std::mutex> lock(in_flight().mu);
  const long at = give_work_locked(s);
  auto* stream = reinterpret_cast<Stream*>(s);
  if (stream && !stream->barriers.empty())
    stream->deferred.emplace_back(at, std::move(work));
  else
    work();
}

// One query of work not yet complete: cudaErrorNotReady while `pending` lasts (false), then done
// (true). Caller holds the mutex.
bool still_running(int& pending) {
  if (pending <= 0) return false;
  --pending;
  ++machine().not_ready_answers;
  return true;
}

}  // namespace

long furnace_standin::queue_collective(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(in_flight().mu);
  const long at = give_work_locked(s);
  if (s) reinterpret_cast<Stream*>(s)->barriers.push_back(at);
  return at;
}

bool furnace_standin::ready_for(cudaStream_t s, long position) {
  std::lock_guard<std::mutex> lock(in_flight().mu);
  const auto* stream = reinterpret_cast<const Stream*>(s);
  return !stream || stream->barriers.empty() || stream->barriers.front() >= position;
}

namespace {
// Ends the barrier at `position` of `stream`: the work deferred behind it runs, up to the next
// open barrier (all of it when none is left); then any stream waiting for an event this passed
// goes on too. Caller holds the mutex.
void end_barrier_locked(Stream* stream, long position) {
  auto& b = stream->barriers;
  b.erase(std::remove(b.begin(), b.end(), position), b.end());
  const long upto = b.empty() ? std::numeric_limits<long>::max() : b.front();
  while (!stream->deferred.empty() && stream->deferred.front().first < upto) {
    stream->deferred.front().second();
    stream->deferred.pop_front();
  }
  auto& deps = in_flight().dependencies;
  for (size_t i = 0; i < deps.size();) {
    if (limit(*deps[i].on) < deps[i].until) {
      ++i;
      continue;
    }
    const Dependency d = deps[i];
    deps.erase(deps.begin() + static_cast<long>(i));
    end_barrier_locked(d.waiting, d.position);
    i = 0;  // that may have released others
  }
  in_flight().ended.notify_all();
}
}  // namespace

void furnace_standin::end_collective(cudaStream_t s, long position) {
  std::lock_guard<std::mutex> lock(in_flight().mu);
  if (s) end_barrier_locked(reinterpret_cast<Stream*>(s), position);
}

extern "C" {

// The tests and tools/gpu_check.sh look for this symbol: a process that has it is not on a GPU.
const char* furnace_cuda_standin() { return "furnace CUDA stand-in runtime (no GPU)"; }

// ---- errors and versions --------------------------------------------------------------------
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "unknown error";
  }
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return last_error; }
// As the real runtime: 0 when no driver is installed, and success either way.
cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue);
  (void)driver_status();
  *v = machine().driver_version;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

// ---- devices --------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* n) {
  if (!n) return fail(cudaErrorInvalidValue);
  *n = 0;
  STANDIN_INIT();
  *n = static_cast<int>(machine().visible.size());
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  STANDIN_INIT();
  *d = current_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  STANDIN_INIT();
  if (!valid(d)) return fail(cudaErrorInvalidDevice);
  current_device = d;
  touch_context(d);  // CUDA 12+: cudaSetDevice creates the primary context
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  STANDIN_INIT();
  if (!valid(d)) return fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  const Gpu& g = logical(d);
  std::snprintf(p->name, sizeof p->name, "%s", g.name.c_str());
  std::memcpy(p->uuid.bytes, g.uuid, 16);
  p->totalGlobalMem = g.total;
  p->multiProcessorCount = 132;
  p->major = 9;
  p->minor = 0;
  p->pciBusID = g.pci_bus;
  p->pciDeviceID = 0;
  p->pciDomainID = 0;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->sharedMemPerBlock = 48 << 10;
  p->l2CacheSize = 60 << 20;
  p->memoryBusWidth = 6144;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  STANDIN_INIT();
  if (!valid(d)) return fail(cudaErrorInvalidDevice);
  switch (a) {
    case cudaDevAttrClockRate: *v = 1980000; break;             // kHz (H200 boost)
    case cudaDevAttrMemoryClockRate: *v = 3201000; break;       // kHz
    case cudaDevAttrGlobalMemoryBusWidth: *v = 6144; break;     // bits
    case cudaDevAttrMultiProcessorCount: *v = 132; break;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
    case cudaDevAttrWarpSize: *v = 32; break;
    default: *v = 0; break;
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  STANDIN_INIT();
  std::unique_lock<std::mutex> lock(in_flight().mu);
  const auto all_ended = [] {
    for (const Stream* s : in_flight().streams)
      if (s->device == current_device && !s->barriers.empty()) return false;
    return true;
  };
  wait_for(lock, "cudaDeviceSynchronize", all_ended);
  for (Stream* s : in_flight().streams)
    if (s->device == current_device) complete(*s);
  return cudaSuccess;
}
cudaError_t cudaDeviceCanAccessPeer(int* can, int a, int b) {
  STANDIN_INIT();
  if (!valid(a) || !valid(b)) return fail(cudaErrorInvalidDevice);
  *can = a != b;
  return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) {
  STANDIN_INIT();
  return cudaSuccess;
}

// ---- memory: host memory standing in for the device's -----------------------------------------
cudaError_t cudaMalloc(void** p, size_t bytes) {
  STANDIN_INIT();
  const int d = current_device;
  touch_context(d);
  Machine& m = machine();
  std::lock_guard<std::mutex> lock(m.mu);
  Gpu& g = logical(d);
  const size_t taken = g.used + (g.context ? m.context_bytes : 0);
  if (bytes > g.total || taken + bytes > g.total) return fail(cudaErrorMemoryAllocation);
  void* q = std::malloc(std::max<size_t>(bytes, 1));
  if (!q) return fail(cudaErrorMemoryAllocation);
  g.used += bytes;
  m.allocations[q] = {d, bytes};
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  STANDIN_INIT();
  if (!p) return cudaSuccess;
  Machine& m = machine();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.allocations.find(p);
  if (it == m.allocations.end()) return fail(cudaErrorInvalidValue);
  logical(it->second.first).used -= it->second.second;
  m.allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  STANDIN_INIT();
  touch_context(current_device);
  Machine& m = machine();
  std::lock_guard<std::mutex> lock(m.mu);
  const Gpu& g = logical(current_device);
  *total = g.total;
  *free_bytes = g.total - g.used - (g.context ? m.context_bytes : 0);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  STANDIN_INIT();
  *p = std::malloc(std::max<size_t>(bytes, 1));
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t s) {
  STANDIN_INIT();
  run_on_stream(s, [=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind k) {
  return cudaMemcpyAsync(dst, src, bytes, k, nullptr);
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int, const void* src, int, size_t bytes, cudaStream_t s) {
  STANDIN_INIT();
  run_on_stream(s, [=] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  STANDIN_INIT();
  run_on_stream(s, [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

// ---- streams and events: the work is done when it is queued; queries may say otherwise ---------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  STANDIN_INIT();
  touch_context(current_device);
  auto* stream = new Stream;
  stream->device = current_device;
  std::lock_guard<std::mutex> lock(in_flight().mu);
  in_flight().streams.push_back(stream);
  *s = reinterpret_cast<cudaStream_t>(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  auto* stream = reinterpret_cast<Stream*>(s);
  std::lock_guard<std::mutex> lock(in_flight().mu);
  std::vector<Stream*>& streams = in_flight().streams;
  streams.erase(std::remove(streams.begin(), streams.end(), stream), streams.end());
  for (Event* e : in_flight().events)  // the driver completes a destroyed stream's work
    if (e->stream == stream) e->stream = nullptr;
  std::vector<Dependency> waiting_on_it;
  auto& deps = in_flight().dependencies;
  for (size_t i = 0; i < deps.size();)
    if (deps[i].waiting == stream) {
      deps.erase(deps.begin() + static_cast<long>(i));
    } else if (deps[i].on == stream) {
      waiting_on_it.push_back(deps[i]);
      deps.erase(deps.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  for (const Dependency& d : waiting_on_it) end_barrier_locked(d.waiting, d.position);
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  STANDIN_INIT();
  if (!s) return cudaSuccess;
  auto* stream = reinterpret_cast<Stream*>(s);
  std::lock_guard<std::mutex> lock(in_flight().mu);
  if (stream->done < stream->queued && still_running(stream->pending)) return fail(cudaErrorNotReady);
  complete(*stream);
  if (stream->done < stream->queued) return fail(cudaErrorNotReady);  // behind a collective
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  STANDIN_INIT();
  if (!s) return cudaSuccess;
  auto* stream = reinterpret_cast<Stream*>(s);
  std::unique_lock<std::mutex> lock(in_flight().mu);
  const long target = stream->queued;
  wait_for(lock, "cudaStreamSynchronize", [&] { return limit(*stream) >= target; });
  complete(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  STANDIN_INIT();
  std::lock_guard<std::mutex> lock(in_flight().mu);
  const long at = give_work_locked(s);
  const auto* ev = reinterpret_cast<const Event*>(e);
  // An event behind an open collective: what `s` is given from now on waits for it.
  if (s && ev && ev->stream && limit(*ev->stream) < ev->position) {
    auto* stream = reinterpret_cast<Stream*>(s);
    stream->barriers.push_back(at);
    in_flight().dependencies.push_back({stream, at, ev->stream, ev->position});
  }
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  STANDIN_INIT();
  auto* event = new Event{current_device, {}, false};
  std::lock_guard<std::mutex> lock(in_flight().mu);
  in_flight().events.push_back(event);
  *e = reinterpret_cast<cudaEvent_t>(event);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  auto* event = reinterpret_cast<Event*>(e);
  std::lock_guard<std::mutex> lock(in_flight().mu);
  std::vector<Event*>& events = in_flight().events;
  events.erase(std::remove(events.begin(), events.end(), event), events.end());
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  STANDIN_INIT();
  auto* ev = reinterpret_cast<Event*>(e);
  std::lock_guard<std::mutex> lock(in_flight().mu);
  Machine& m = machine();
  ev->at_s = m.event_step_s > 0 ? (m.event_clock_s += m.event_step_s)
                                : std::chrono::duration<double>(std::chrono::steady_clock::now() - m.started).count();
  ev->recorded = true;
  ev->stream = reinterpret_cast<Stream*>(s);
  ev->position = give_work_locked(s);
  ev->pending = machine().not_ready_queries.load();
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  STANDIN_INIT();
  auto* ev = reinterpret_cast<Event*>(e);
  std::lock_guard<std::mutex> lock(in_flight().mu);
  if (!completed(*ev) && still_running(ev->pending)) return fail(cudaErrorNotReady);
  complete(*ev);
  if (!completed(*ev)) return fail(cudaErrorNotReady);  // behind a collective
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  STANDIN_INIT();
  auto* ev = reinterpret_cast<Event*>(e);
  std::unique_lock<std::mutex> lock(in_flight().mu);
  wait_for(lock, "cudaEventSynchronize", [&] { return !ev->stream || limit(*ev->stream) >= ev->position; });
  complete(*ev);
  return cudaSuccess;
}
// cudaErrorNotReady while either event is not complete, as the runtime answers.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  STANDIN_INIT();
  const auto* x = reinterpret_cast<Event*>(a);
  const auto* y = reinterpret_cast<Event*>(b);
  std::lock_guard<std::mutex> lock(in_flight().mu);
  if (!x->recorded || !y->recorded) return fail(cudaErrorInvalidResourceHandle);
  if (!completed(*x) || !completed(*y)) return fail(cudaErrorNotReady);
  *ms = static_cast<float>((y->at_s - x->at_s) * 1e3);  // a float, as the runtime's: 0.25 ms apart after an hour
  return cudaSuccess;
}

// For the tests (dlsym): FURNACE_STANDIN_NOT_READY from now on, and how many queries answered
// cudaErrorNotReady so far.
void furnace_standin_set_not_ready(int queries) {
  driver_status();  // reads the environment first, which would otherwise overwrite this later
  machine().not_ready_queries = queries;
}
long furnace_standin_not_ready_answers() { return machine().not_ready_answers.load(); }
// FURNACE_STANDIN_EVENT_STEP_S from now on.
void furnace_standin_set_event_step(double seconds) {
  driver_status();
  std::lock_guard<std::mutex> lock(in_flight().mu);
  machine().event_step_s = seconds;
}

// ---- kernels: registered so launches can be named, never run ---------------------------------
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void*) {
  STANDIN_INIT();
  std::memset(a, 0, sizeof *a);
  a->maxThreadsPerBlock = 1024;
  a->numRegs = 32;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void*, int block_size,
                                                                   size_t, unsigned) {
  STANDIN_INIT();
  *blocks = block_size > 0 ? std::max(1, 2048 / block_size) : 0;
  return cudaSuccess;
}
void** __cudaRegisterFatBinary(void* fat) {
  static void* handle = nullptr;
  (void)fat;
  return &handle;
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
void __cudaRegisterFunction(void**, const char* host, char*, const char* device_name, int, uint3*,
                            uint3*, dim3*, dim3*, int*) {
  Machine& m = machine();
  std::lock_guard<std::mutex> lock(m.mu);
  int status = -1;
  char* demangled = abi::__cxa_demangle(device_name, nullptr, nullptr, &status);
  m.kernels[host] = status == 0 && demangled ? demangled : device_name;
  std::free(demangled);
}
unsigned __cudaPushCallConfiguration(dim3, dim3, size_t, struct CUstream_st*) { return 0; }
cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared, void* stream) {
  *grid = dim3(1);
  *block = dim3(1);
  *shared = 0;
  *static_cast<cudaStream_t*>(stream) = nullptr;
  return cudaSuccess;
}
cudaError_t __cudaGetKernel(cudaKernel_t* k, const void* fun) {
  *k = reinterpret_cast<cudaKernel_t>(const_cast<void*>(fun));
  return cudaSuccess;
}
static cudaError_t launch(const void* fun) {
  STANDIN_INIT();
  Machine& m = machine();
  std::string name = "?";
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (auto it = m.kernels.find(fun); it != m.kernels.end()) name = it->second;
  }
  std::fprintf(stderr, "furnace CUDA stand-in: kernel %s cannot run: this is a stand-in runtime, not a GPU\n",
               name.c_str());
  return fail(cudaErrorNotSupported);
}
cudaError_t __cudaLaunchKernel(cudaKernel_t k, dim3, dim3, void**, size_t, cudaStream_t) {
  return launch(reinterpret_cast<const void*>(k));
}
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t k, dim3, dim3, void**, size_t, cudaStream_t) {
  return launch(reinterpret_cast<const void*>(k));
}
cudaError_t cudaLaunchKernel(const void* fun, dim3, dim3, void**, size_t, cudaStream_t) { return launch(fun); }

// ---- cuBLAS: handles and settings; no GEMM runs ---------------------------------------------------
// workspace_set: cublasSetWorkspace since the last cublasSetStream, which puts a real handle back
// on cuBLAS's own workspace pool; a GEMM without it would not use the caching allocator's block.
struct StandinBlas {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool workspace_set = false;
};
static std::atomic<size_t> g_last_gemm_workspace_bytes{0};
// For the tests (dlsym): the workspace size the last GEMM would have run with.
size_t furnace_standin_last_gemm_workspace_bytes() { return g_last_gemm_workspace_bytes.load(); }
cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  if (driver_status() != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  *h = reinterpret_cast<cublasHandle_t>(new StandinBlas);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  delete reinterpret_cast<StandinBlas*>(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  auto* b = reinterpret_cast<StandinBlas*>(h);
  b->stream = s;
  b->workspace = nullptr;
  b->workspace_bytes = 0;
  b->workspace_set = false;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void* w, size_t bytes) {
  auto* b = reinterpret_cast<StandinBlas*>(h);
  b->workspace = w;
  b->workspace_bytes = bytes;
  b->workspace_set = true;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*,
                            void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) {
  const auto* b = reinterpret_cast<StandinBlas*>(h);
  if (!b->workspace_set) {
    std::fprintf(stderr, "furnace CUDA stand-in: cublasGemmEx on cuBLAS's own workspace pool (no "
                         "cublasSetWorkspace after the last cublasSetStream)\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  g_last_gemm_workspace_bytes = b->workspace_bytes;
  std::fprintf(stderr, "furnace CUDA stand-in: cublasGemmEx cannot run: this is a stand-in runtime, not a GPU\n");
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

// ---- NVML: every physical GPU, CUDA_VISIBLE_DEVICES ignored (as the real NVML) ---------------------
int nvmlInit_v2() {
  (void)driver_status();
  return machine().driver == Machine::Driver::none ? 9 /* NVML_ERROR_DRIVER_NOT_LOADED */ : 0;
}
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int rc) { return rc == 9 ? "Driver Not Loaded" : rc ? "Unknown Error" : "Success"; }
int nvmlSystemGetDriverVersion(char* buf, unsigned size) {
  const int v = machine().driver_version;  // a driver that supports CUDA 13.0 is R580 or newer
  std::snprintf(buf, size, "%s (stand-in, CUDA %d.%d)", v >= 13000 ? "580.00.00" : "535.00.00", v / 1000, v % 1000 / 10);
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = static_cast<unsigned>(machine().physical.size());
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** h) {
  if (i >= machine().physical.size()) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *h = &machine().physical[i];
  return 0;
}
int nvmlDeviceGetName(void* h, char* buf, unsigned size) {
  std::snprintf(buf, size, "%s", static_cast<Gpu*>(h)->name.c_str());
  return 0;
}
int nvmlDeviceGetUUID(void* h, char* buf, unsigned size) {
  std::snprintf(buf, size, "%s", uuid_string(static_cast<Gpu*>(h)->uuid).c_str());
  return 0;
}
struct StandinPciInfo {  // nvmlPciInfo_t (v3)
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
int nvmlDeviceGetPciInfo_v3(void* h, StandinPciInfo* p) {
  const Gpu& g = *static_cast<Gpu*>(h);
  std::memset(p, 0, sizeof *p);
  p->bus = static_cast<unsigned>(g.pci_bus);
  std::snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", g.pci_bus);
  std::snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", g.pci_bus);
  return 0;
}
struct StandinMemory { unsigned long long total, free, used; };
int nvmlDeviceGetMemoryInfo(void* h, StandinMemory* mem) {
  Machine& m = machine();
  std::lock_guard<std::mutex> lock(m.mu);
  const Gpu& g = *static_cast<Gpu*>(h);
  mem->total = g.total;
  mem->used = g.used + (g.context ? m.context_bytes : 0);
  mem->free = mem->total - mem->used;
  return 0;
}
int nvmlDeviceGetHandleByUUID(const char* uuid, void** h) {
  for (Gpu& g : machine().physical)
    if (uuid_string(g.uuid) == uuid) {
      *h = &g;
      return 0;
    }
  return 6;  // NVML_ERROR_NOT_FOUND
}
struct StandinProcessInfo { unsigned pid; unsigned long long used; unsigned gi, ci; };
// One process, this one, once it has a context on the GPU: its context and its cudaMallocs.
int nvmlDeviceGetComputeRunningProcesses_v3(void* h, unsigned* count, StandinProcessInfo* infos) {
  Machine& m = machine();
  std::lock_guard<std::mutex> lock(m.mu);
  const Gpu& g = *static_cast<Gpu*>(h);
  if (!g.context) {
    *count = 0;
    return 0;
  }
  if (*count < 1) {
    *count = 1;
    return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  }
  *count = 1;
  infos[0] = {static_cast<unsigned>(getpid()), g.used + m.context_bytes, 0xFFFFFFFF, 0xFFFFFFFF};
  return 0;
}
int nvmlDeviceGetUtilizationRates(void*, unsigned* util) {
  util[0] = 0;
  util[1] = 0;
  return 0;
}

}  // extern "C"
