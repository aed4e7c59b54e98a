// backend/cuda/ops/gemm: cublasGemmEx for Linear, and the bias gradient's column sums.
#include "backend/cuda/ops/gemm.cuh"

#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/half_types.cuh"

namespace furnace::cuda {
namespace {

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  throw Error("gemm: unsupported dtype " + std::string(dtype_name(dt)) + " on the cuda backend");
}

// ---- kernels ------------------------------------------------------------------------------------

constexpr int kBiasCols = 32;  // columns per block: one warp reads 32 consecutive floats
constexpr int kBiasRows = 8;   // row groups per block, summed in shared memory

// Thread (x, y) sums rows y, y + 8, ... of column blockIdx.x * 32 + x; row 0 of the block then adds
// the 8 partial sums in order and updates dbias.
template <class T>
__global__ void bias_grad_kernel(float* dbias, const T* dout, int rows, int OC) {
  __shared__ float partial[kBiasRows][kBiasCols + 1];  // +1: no bank conflicts on the column read
  const int col = blockIdx.x * kBiasCols + threadIdx.x;
  float acc = 0.0f;
  if (col < OC)
    for (int r = threadIdx.y; r < rows; r += kBiasRows)
      acc = __fadd_rn(acc, to_f32(dout[static_cast<int64_t>(r) * OC + col]));
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < OC) {
    float sum = 0.0f;
    for (int g = 0; g < kBiasRows; ++g) sum = __fadd_rn(sum, partial[g][threadIdx.x]);
    dbias[col] = __fadd_rn(dbias[col], round_through<T>(sum));
  }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void gemm(cublasHandle_t handle, cudaStream_t stream, GemmWorkspace workspace, const GemmPlan& p, const void* A,
          const void* B, void* C, DType ab_dt, DType c_dt, float alpha, float beta,
          bool allow_tf32) {
  if (p.m <= 0 || p.n <= 0) return;
  if (p.k <= 0) {  // op(A) @ op(B) is empty: C = beta * C, which is C or 0
    FURNACE_CHECK(beta == 0.0f || beta == 1.0f) << "gemm: k == 0 with beta " << beta;
    if (beta == 0.0f)
      FURNACE_CUDA_CHECK(cudaMemsetAsync(C, 0, static_cast<size_t>(p.ldc) * p.n * dtype_size(c_dt), stream));
    return;
  }
  const cublasComputeType_t compute = ab_dt == DType::f32 && allow_tf32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  FURNACE_CUBLAS_CHECK(cublasSetStream(handle, stream));
  FURNACE_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace.ptr, workspace.bytes));
  FURNACE_CUBLAS_CHECK(cublasGemmEx(handle, p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, p.m, p.n, p.k, &alpha, A,
                                    cuda_type(ab_dt), p.lda, B, cuda_type(ab_dt), p.ldb, &beta, C,
                                    cuda_type(c_dt), p.ldc, compute, CUBLAS_GEMM_DEFAULT));
}

void bias_grad(cudaStream_t stream, float* dbias, const void* dout, int rows, int OC, DType dt) {
  if (OC <= 0 || rows <= 0) return;
  const dim3 block(kBiasCols, kBiasRows);
  const dim3 grid(static_cast<unsigned>((OC + kBiasCols - 1) / kBiasCols));
  dispatch_float(dt, "bias_grad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    bias_grad_kernel<T><<<grid, block, 0, stream>>>(dbias, static_cast<const T*>(dout), rows, OC);
  });
  FURNACE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace furnace::cuda
