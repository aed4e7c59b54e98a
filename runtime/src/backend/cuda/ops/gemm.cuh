// backend/cuda/ops/gemm: Linear's GEMMs through cuBLAS (cublasGemmEx: fp32, or f16/bf16 inputs with fp32
// accumulation; fp32 keeps full precision unless TF32 is allowed) and the bias-gradient reduction.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "furnace/dtype.h"
#include "backend/cuda/ops/gemm_plan.h"

namespace furnace::cuda {

// The workspace a handle's GEMMs use (cuBLAS's, from the caching allocator; null and 0 for none).
struct GemmWorkspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// C = alpha * op(A) @ op(B) + beta * C as `plan` says (column-major); A and B of ab_dt, C of c_dt.
// The caller holds the handle's lock. The handle gets `stream`, then `workspace` (cublasSetStream
// puts a handle back on cuBLAS's own workspace pool, so it is set again after every stream change,
// as PyTorch does). An empty output launches nothing; k == 0 leaves beta * C (zero-filled when
// beta is 0).
void gemm(cublasHandle_t handle, cudaStream_t stream, GemmWorkspace workspace, const GemmPlan& plan, const void* A,
          const void* B, void* C, DType ab_dt, DType c_dt, float alpha, float beta,
          bool allow_tf32);

// dbias (f32, OC) += the column sums of dout (rows, OC) of dt, each summed in fp32 and, for a
// 16-bit dt, rounded to dt before it is added (ref::linear_backward_half).
void bias_grad(cudaStream_t stream, float* dbias, const void* dout, int rows, int OC, DType dt);

}  // namespace furnace::cuda
