// What many tests need and nothing in the runtime provides: seeded random data, and tensors moved
// between the host and a device as plain float vectors (f16/bf16 rounded on the way in, widened on
// the way out). Header-only; every test executable may include it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "furnace/dtype.h"   // defines: f32_to_f16_bits, f16_bits_to_f32, ...
#include "furnace/ops.h"     // defines: OpContext, ops::copy_to_device, ops::copy_to_host
#include "furnace/random.h"  // defines: Generator

namespace furnace::test_support {

// n values uniform in [lo, hi), from furnace's Generator seeded with `seed`.
inline std::vector<float> random_vec(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Generator g(seed);
  std::vector<float> v(n);
  for (float& x : v) x = g.uniform(lo, hi);
  return v;
}

// A host (CPU) f32 tensor of `shape` holding `v`.
inline Tensor host_tensor(const std::vector<float>& v, Shape shape) {
  Tensor t = Tensor::empty_host(std::move(shape));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// A tensor of `shape` and dtype `dt` on cuda:`device` holding `v` (rounded to dt).
inline Tensor upload(Runtime& rt, int device, const std::vector<float>& v, Shape shape, DType dt = DType::f32) {
  OpContext ctx{rt, device, 0};
  Tensor t = Tensor::empty(rt, Device::cuda(device), std::move(shape), dt);
  if (dt == DType::f32) {
    ops::copy_to_device(ctx, t, v.data());
  } else {
    std::vector<uint16_t> bits(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      bits[i] = dt == DType::f16 ? f32_to_f16_bits(v[i]) : f32_to_bf16_bits(v[i]);
    ops::copy_to_device(ctx, t, bits.data());
  }
  return t;
}

// A device tensor's values as floats (f16/bf16 widened exactly).
inline std::vector<float> download(Runtime& rt, const Tensor& t) {
  OpContext ctx{rt, t.device().index, 0};
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::f32) {
    ops::copy_to_host(ctx, out.data(), t);
  } else {
    std::vector<uint16_t> bits(out.size());
    ops::copy_to_host(ctx, bits.data(), t);
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = t.dtype() == DType::f16 ? f16_bits_to_f32(bits[i]) : bf16_bits_to_f32(bits[i]);
  }
  return out;
}

}  // namespace furnace::test_support
