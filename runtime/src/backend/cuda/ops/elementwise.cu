// backend/cuda/ops/elementwise: relu, cast, add, the bias broadcast and the 16-bit gradient accumulation.
// Sums use __fadd_rn so nvcc cannot fuse them into something the CPU reference does not compute.
#include "backend/cuda/ops/elementwise.cuh"

#include "backend/cuda/ops/half_types.cuh"
#include "backend/cuda/ops/launch.cuh"

namespace furnace::cuda {
namespace {

// ---- kernels ------------------------------------------------------------------------------------

template <class T>
__global__ void relu_forward_kernel(T* x, int64_t n) {
  for (int64_t i : GridStride{n})
    if (to_f32(x[i]) < 0.0f) x[i] = from_f32<T>(0.0f);  // NaN < 0 is false: NaN stays
}

template <class T>
__global__ void relu_backward_kernel(T* dx, const T* out, int64_t n) {
  for (int64_t i : GridStride{n})
    if (!(to_f32(out[i]) > 0.0f)) dx[i] = from_f32<T>(0.0f);
}

template <class In, class Out>
__global__ void cast_kernel(Out* out, const In* in, int64_t n) {
  for (int64_t i : GridStride{n}) out[i] = from_f32<Out>(to_f32(in[i]));
}

__global__ void mul_scalar_kernel(float* out, const float* in, float alpha, int64_t n) {
  for (int64_t i : GridStride{n}) out[i] = __fmul_rn(in[i], alpha);
}

__global__ void add_kernel(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i : GridStride{n}) out[i] = __fadd_rn(a[i], b[i]);
}

template <class Bits>
__global__ void broadcast_rows_kernel(Bits* out, const Bits* bias, int64_t total, int cols) {
  for (int64_t i : GridStride{total}) out[i] = bias[i % cols];
}

template <class T>
__global__ void accumulate_half_kernel(float* dst, const T* src, int64_t n) {
  for (int64_t i : GridStride{n}) dst[i] = __fadd_rn(dst[i], to_f32(src[i]));
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void relu_forward(cudaStream_t stream, void* x, int64_t n, DType dt, int64_t max_blocks) {
  dispatch_float(dt, "relu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(stream, n, max_blocks, relu_forward_kernel<T>, static_cast<T*>(x), n);
  });
}

void relu_backward(cudaStream_t stream, void* dx, const void* out, int64_t n, DType dt,
                   int64_t max_blocks) {
  dispatch_float(dt, "relu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(stream, n, max_blocks, relu_backward_kernel<T>, static_cast<T*>(dx),
                       static_cast<const T*>(out), n);
  });
}

void cast(cudaStream_t stream, void* out, DType out_dt, const void* in, DType in_dt, int64_t n,
          int64_t max_blocks) {
  FURNACE_CHECK((in_dt == DType::f32 && is_half(out_dt)) || (is_half(in_dt) && out_dt == DType::f32))
      << "cast: cannot cast " << dtype_name(in_dt) << " to " << dtype_name(out_dt);
  if (in_dt == DType::f32) {
    dispatch_half(out_dt, "cast", [&](auto tag) {
      using Out = typename decltype(tag)::type;
      launch_elementwise(stream, n, max_blocks, cast_kernel<float, Out>, static_cast<Out*>(out),
                         static_cast<const float*>(in), n);
    });
  } else {
    dispatch_half(in_dt, "cast", [&](auto tag) {
      using In = typename decltype(tag)::type;
      launch_elementwise(stream, n, max_blocks, cast_kernel<In, float>, static_cast<float*>(out),
                         static_cast<const In*>(in), n);
    });
  }
}

void mul_scalar(cudaStream_t stream, float* out, const float* in, float alpha, int64_t n,
                int64_t max_blocks) {
  launch_elementwise(stream, n, max_blocks, mul_scalar_kernel, out, in, alpha, n);
}

void add(cudaStream_t stream, float* out, const float* a, const float* b, int64_t n,
         int64_t max_blocks) {
  launch_elementwise(stream, n, max_blocks, add_kernel, out, a, b, n);
}

void broadcast_rows(cudaStream_t stream, void* out, const void* bias, int rows, int cols, DType dt,
                    int64_t max_blocks) {
  if (cols <= 0) return;
  const int64_t total = static_cast<int64_t>(rows) * cols;
  if (dtype_size(dt) == 4)
    launch_elementwise(stream, total, max_blocks, broadcast_rows_kernel<uint32_t>,
                       static_cast<uint32_t*>(out), static_cast<const uint32_t*>(bias), total, cols);
  else
    launch_elementwise(stream, total, max_blocks, broadcast_rows_kernel<uint16_t>,
                       static_cast<uint16_t*>(out), static_cast<const uint16_t*>(bias), total, cols);
}

void accumulate_half(cudaStream_t stream, float* dst, const void* src, int64_t n, DType dt,
                     int64_t max_blocks) {
  dispatch_half(dt, "accumulate_half", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_elementwise(stream, n, max_blocks, accumulate_half_kernel<T>, dst,
                       static_cast<const T*>(src), n);
  });
}

}  // namespace furnace::cuda
