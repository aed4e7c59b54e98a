// backend/cuda/ops/half_types: the element types behind DType for the kernels (float, __half,
// __nv_bfloat16), conversions through f32 with round-to-nearest-even, and dispatch from a DType to
// a kernel template. Included by the .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "furnace/dtype.h"
#include "furnace/error.h"

namespace furnace::cuda {

template <class T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// The value an f32 becomes when stored as T and read back.
template <class T>
__device__ __forceinline__ float round_through(float v) { return to_f32<T>(from_f32<T>(v)); }

template <class T>
struct TypeTag {
  using type = T;
};

// fn(TypeTag<T>{}) for the floating type of `dt` (f32, f16 or bf16); throws for any other.
template <class Fn>
void dispatch_float(DType dt, const char* op, Fn&& fn) {
  switch (dt) {
    case DType::f32: fn(TypeTag<float>{}); return;
    case DType::f16: fn(TypeTag<__half>{}); return;
    case DType::bf16: fn(TypeTag<__nv_bfloat16>{}); return;
    default: break;
  }
  FURNACE_FAIL() << op << ": unsupported dtype " << dtype_name(dt) << " on the cuda backend";
}

// fn(TypeTag<T>{}) for the 16-bit type of `dt` (f16 or bf16).
template <class Fn>
void dispatch_half(DType dt, const char* op, Fn&& fn) {
  switch (dt) {
    case DType::f16: fn(TypeTag<__half>{}); return;
    case DType::bf16: fn(TypeTag<__nv_bfloat16>{}); return;
    default: break;
  }
  FURNACE_FAIL() << op << ": expected float16 or bfloat16, got " << dtype_name(dt);
}

}  // namespace furnace::cuda
