// Runtime: a backend plus one caching allocator per device, and the device-tensor factory.
#include "furnace/runtime.h"

#include "furnace/error.h"
#include "furnace/tensor.h"

namespace furnace {

Runtime::Runtime(std::unique_ptr<Backend> backend, TraceBus& trace)
    : backend_(std::move(backend)), trace_(trace) {
  FURNACE_ASSERT(backend_ != nullptr) << "Runtime needs a backend";
  for (int d = 0; d < backend_->device_count(); ++d)
    allocators_.push_back(std::make_unique<CachingAllocator>(backend_->raw_allocator(d), d, &trace_));
}

Runtime::~Runtime() {
  allocators_.clear();  // segments go back to the backend while it still exists
  backend_.reset();
}

CachingAllocator& Runtime::allocator(int device) {
  FURNACE_CHECK(device >= 0 && device < static_cast<int>(allocators_.size()))
      << "invalid device ordinal " << device << ": this process sees " << allocators_.size()
      << " device(s)";
  return *allocators_[static_cast<size_t>(device)];
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
