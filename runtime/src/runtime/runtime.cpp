// Runtime: a backend plus one caching allocator per device, and the device-tensor factory.
#include "furnace/runtime.h"

#include "furnace/error.h"
#include "furnace/op_table.h"  // defines: OpTable
#include "furnace/tensor.h"

namespace furnace {

// Where the messages come from (PyTorch at main):
//   "No CUDA GPUs are available": c10/cuda/CUDAFunctions.cpp, device_count_ensure_non_zero(),
//     which torch.cuda's lazy init (torch._C._cuda_init) calls when the driver reports no device
//     (CUDA_VISIBLE_DEVICES="" makes cuInit return CUDA_ERROR_NO_DEVICE).
//   "CUDA error: invalid device ordinal": C10_CUDA_CHECK(cudaSetDevice(...)) in set_device and in
//     the device guards, with cudaGetErrorString(cudaErrorInvalidDevice).
//   "Invalid device id": torch/cuda/__init__.py, get_device_properties.
//   "Invalid device argument N: did you call init?": c10/cuda/CUDACachingAllocator.cpp,
//     assertValidDevice, behind memory_stats and hence memory_allocated and friends.
// Each gets, after it, which devices this process sees (Backend::describe_devices).

Runtime::Runtime(std::unique_ptr<Backend> backend, TraceBus& trace)
    : backend_(std::move(backend)), trace_(trace) {
  FURNACE_ASSERT(backend_ != nullptr) << "Runtime needs a backend";
  // A backend whose devices are fixed at construction (make_sim_backend, cuda) is ready now; one
  // process on a shared machine waits for its first device use.
  if (backend_->initialized()) {
    create_allocators();
    initialized_ = true;
  }
}

Runtime::~Runtime() {
  for (size_t d = 0; d < gemm_workspaces_.size(); ++d)
    if (gemm_workspaces_[d]) allocators_[d]->deallocate(gemm_workspaces_[d]);
  allocators_.clear();  // segments go back to the backend while it still exists
  backend_.reset();
}

void Runtime::create_allocators() {
  for (int d = 0; d < backend_->device_count(); ++d)
    allocators_.push_back(std::make_unique<CachingAllocator>(backend_->raw_allocator(d), d, &trace_));
  gemm_workspace_ready_ = std::make_unique<std::atomic<bool>[]>(allocators_.size());
  gemm_workspaces_.assign(allocators_.size(), nullptr);
}

void Runtime::ensure_gemm_workspace(int device) {
  CachingAllocator& alloc = allocator(device);  // checks the ordinal (and initialises)
  std::atomic<bool>& ready = gemm_workspace_ready_[static_cast<size_t>(device)];
  if (ready.load(std::memory_order_acquire)) return;
  // One lock for every device: this runs once per device, and DataParallel's replica threads
  // (one per device) may arrive together.
  std::lock_guard<std::mutex> lock(init_mutex_);
  if (ready.load(std::memory_order_relaxed)) return;
  OpTable& table = backend_->op_table();
  if (const size_t bytes = table.gemm_workspace_bytes(device); bytes > 0) {
    void* block = alloc.allocate(bytes);  // out of memory here is PyTorch's too, at the first GEMM
    table.set_gemm_workspace(device, block, bytes);
    gemm_workspaces_[static_cast<size_t>(device)] = block;
  }
  ready.store(true, std::memory_order_release);
}

bool Runtime::is_initialized() const { return initialized_.load(std::memory_order_acquire); }

void Runtime::init() {
  if (is_initialized()) return;
  std::lock_guard<std::mutex> lock(init_mutex_);
  if (is_initialized()) return;
  backend_->initialize();
  FURNACE_CHECK(backend_->device_count() > 0)
      << "No CUDA GPUs are available (" << backend_->describe_devices() << ")";
  create_allocators();
  initialized_.store(true, std::memory_order_release);
}

std::string existing_ordinals(int n) {
  if (n <= 0) return "no cuda:N exists";
  return n == 1 ? "only cuda:0 exists" : "only cuda:0.." + std::to_string(n - 1) + " exist";
}

void Runtime::check_ordinal(int device, const char* call) {
  init();
  const int n = device_count();
  FURNACE_CHECK(device >= 0 && device < n)
      << "CUDA error: invalid device ordinal (" << call << (*call ? "(" : "cuda:") << device
      << (*call ? ")" : "") << ": " << backend_->describe_devices() << "; inside a process "
      << existing_ordinals(n) << ")";
}

CachingAllocator& Runtime::allocator(int device) {
  check_ordinal(device, "");
  return *allocators_[static_cast<size_t>(device)];
}

int Runtime::current_device() {
  init();
  return current_device_.load();
}

void Runtime::set_device(int device) {
  if (device < 0) return;  // torch.cuda.set_device: a no-op for a negative device
  check_ordinal(device, "torch.cuda.set_device");
  backend_->use_device(device);
  current_device_.store(device);
}

const GpuSpec& Runtime::get_device_properties(int device) {
  init();
  FURNACE_CHECK(device >= 0 && device < device_count())
      << "Invalid device id (torch.cuda.get_device_properties(" << device << "): "
      << backend_->describe_devices() << ")";
  return backend_->device_spec(device);
}

MemInfo Runtime::mem_get_info(int device) {
  check_ordinal(device, "torch.cuda.mem_get_info");
  MemInfo m;
  backend_->raw_allocator(device).mem_get_info(&m.free_bytes, &m.total_bytes);
  return m;
}

const CachingAllocator* Runtime::stats_allocator(int device) {
  if (!is_initialized()) return nullptr;  // torch.cuda.memory_stats() is {} before CUDA starts
  FURNACE_CHECK(device >= 0 && device < static_cast<int>(allocators_.size()))
      << "Invalid device argument " << device << ": did you call init? ("
      << backend_->describe_devices() << ")";
  return allocators_[static_cast<size_t>(device)].get();
}

size_t Runtime::memory_allocated(int device) {
  const CachingAllocator* a = stats_allocator(device);
  return a ? a->memory_allocated() : 0;
}
size_t Runtime::memory_reserved(int device) {
  const CachingAllocator* a = stats_allocator(device);
  return a ? a->memory_reserved() : 0;
}
size_t Runtime::max_memory_allocated(int device) {
  const CachingAllocator* a = stats_allocator(device);
  return a ? a->max_memory_allocated() : 0;
}
size_t Runtime::max_memory_reserved(int device) {
  const CachingAllocator* a = stats_allocator(device);
  return a ? a->max_memory_reserved() : 0;
}

void Runtime::empty_cache(int device) {
  if (!is_initialized()) return;  // torch.cuda.empty_cache: only "if is_initialized()"
  allocator(device).empty_cache();
}

void Runtime::empty_cache() {
  if (!is_initialized()) return;
  for (auto& a : allocators_) a->empty_cache();
}

Tensor Tensor::empty(Runtime& rt, Device device, Shape shape, DType dtype) {
  if (!device.is_cuda()) return empty_host(std::move(shape), dtype);
  CachingAllocator& alloc = rt.allocator(device.index);
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* p = alloc.allocate(bytes);
  auto release = [](void* owner, void* ptr) { static_cast<CachingAllocator*>(owner)->deallocate(ptr); };
  return from_storage(std::make_shared<Storage>(p, bytes, &alloc, release), device,
                      std::move(shape), dtype);
}

}  // namespace furnace
