// Tensor basics: shapes, host storage, reshape. Device factories live with the Runtime
// (runtime/runtime.cpp), which owns the allocators.
#include "furnace/tensor.h"

#include <memory>

#include <algorithm>
#include <sstream>

#include "furnace/error.h"

namespace furnace {

std::string Device::str() const {
  return type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '(';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ')';
  return os.str();
}

Storage::~Storage() {
  if (release)
    release(owner, ptr);
  else
    delete[] static_cast<std::byte*>(ptr);
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, Device device, Shape shape,
                            DType dtype) {
  for (int64_t d : shape) FURNACE_CHECK(d >= 0) << "negative dimension in shape " << shape_str(shape);
  Tensor t;
  t.storage_ = std::move(storage);
  t.device_ = device;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::alias(const Tensor& source, Device device, const Tensor& held) {
  FURNACE_ASSERT(source.defined() && held.defined() && held.nbytes() >= source.nbytes())
      << "alias: the held buffer must be at least as large as the source";
  struct Keep {
    std::shared_ptr<Storage> source, held;
  };
  auto keep = std::make_unique<Keep>(Keep{source.storage_, held.storage_});
  auto storage = std::make_shared<Storage>(source.raw(), source.nbytes(), keep.get(),
                                           [](void* owner, void*) { delete static_cast<Keep*>(owner); });
  keep.release();  // the storage owns it now
  return from_storage(std::move(storage), device, source.shape(), source.dtype());
}

Tensor Tensor::empty_host(Shape shape, DType dtype) {
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(new std::byte[bytes > 0 ? bytes : 1], bytes, nullptr,
                                           nullptr);
  return from_storage(std::move(storage), Device::cpu(), std::move(shape), dtype);
}

Tensor Tensor::reshape(Shape shape) const {
  FURNACE_CHECK(shape_numel(shape) == numel())
      << "cannot reshape " << shape_str(shape_) << " to " << shape_str(shape);
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  FURNACE_CHECK(this->dim() > 0) << "narrow() cannot be applied to a 0-dim tensor.";
  FURNACE_CHECK(dim == 0 || dim == -this->dim())
      << "narrow: only dim 0 of a contiguous tensor can be narrowed without strides (got dim " << dim << ")";
  const int64_t n = shape_[0];
  FURNACE_CHECK(start >= 0 && length >= 0 && start <= n - length)
      << "start (" << start << ") + length (" << length << ") exceeds dimension size (" << n << ").";
  Tensor t = *this;
  t.shape_[0] = length;
  t.offset_ += static_cast<size_t>(start) * static_cast<size_t>(shape_numel(shape_) / std::max<int64_t>(n, 1)) *
               dtype_size(dtype_);
  return t;
}

}  // namespace furnace
