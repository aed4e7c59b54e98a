// furnace/tensor.h: Device, Shape and Tensor. A Tensor is a shape, a dtype, a device and a shared
// storage; device storage comes from that device's caching allocator and goes back to it when the
// last Tensor referring to it is destroyed. Contiguous, row-major; no strides. The only views are
// contiguous ranges (narrow along dim 0, reshape), which is all DataParallel's chunks and coalesced
// buffers need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "furnace/dtype.h"

namespace furnace {

class Runtime;

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = -1;  // logical ordinal (cuda:N) for cuda, -1 for cpu

  static Device cpu() { return {DeviceType::cpu, -1}; }
  static Device cuda(int i) { return {DeviceType::cuda, i}; }
  static Device at(int ordinal) { return ordinal < 0 ? cpu() : cuda(ordinal); }  // -1: the host
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;  // "cpu", "cuda:0"
  friend bool operator==(const Device&, const Device&) = default;
};

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "(256, 784)"

// Owns one block. `release(owner, ptr)` gives it back (a caching allocator for device memory);
// with no release function the block is host memory from operator new[].
struct Storage {
  using ReleaseFn = void (*)(void* owner, void* ptr);
  void* ptr = nullptr;
  size_t nbytes = 0;
  void* owner = nullptr;
  ReleaseFn release = nullptr;
  Storage(void* p, size_t n, void* o, ReleaseFn r) : ptr(p), nbytes(n), owner(o), release(r) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised memory on `device` (a cuda device allocates through rt's allocator for it).
  static Tensor empty(Runtime& rt, Device device, Shape shape, DType dtype = DType::f32);
  static Tensor empty_host(Shape shape, DType dtype = DType::f32);
  // Wraps a block already allocated for `device` (used by the factories above).
  static Tensor from_storage(std::shared_ptr<Storage> storage, Device device, Shape shape,
                             DType dtype);
  // A tensor labelled `device` that reads the bytes of `source` (same shape and dtype) and keeps
  // `held` alive: a simulator copy whose bytes are elided (Backend::model_copy), where `held` is
  // the destination buffer the device's allocator counts and `source` is never written while the
  // alias lives (broadcast parameters).
  static Tensor alias(const Tensor& source, Device device, const Tensor& held);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const { return shape_.at(static_cast<size_t>(d < 0 ? d + dim() : d)); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  void* raw() const {
    return storage_ && storage_->ptr ? static_cast<std::byte*>(storage_->ptr) + offset_ : nullptr;
  }
  template <class T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  // Same storage, new shape with the same number of elements.
  Tensor reshape(Shape shape) const;
  // torch.narrow(dim, start, length) for dim 0: rows [start, start + length) as a view sharing
  // this storage (contiguous, so only dim 0 can be narrowed without strides).
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // True when both refer to the same storage (a view and its base, or two views of one buffer).
  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes from the start of the storage (views made by narrow)
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_;
};

}  // namespace furnace
