// furnace/op_table.h: the op table every backend fills, and the one the host's tensors use. The ops
// layer (ops/ops.cpp) checks shapes, dtypes and devices once, calls one of these on raw pointers of
// the op's device, then reports the kernel's cost (Backend::account_kernel). Who fills it:
//   - the host (cpu tensors): cpu_op_table(), the CPU kernels (OpenBLAS sgemm, plain loops);
//   - sim: the same CPU kernels on its device memory, which is host memory (the cost model is
//     behind account_kernel, not here);
//   - cuda: cuBLAS and CUDA kernels (backend/cuda/ops).
// Every entry runs on `where.device`, in stream order on `where.stream`, and returns once the work
// is queued, except the two that return a number: they wait for it and bring it to the host, as
// .item() does (a backend that models copies models that one after the op; see ops.cpp).
// Not here: copies and memset (Backend::copy, Backend::memset), the checks (ops.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "furnace/dtype.h"

namespace furnace {

// Where an op runs. device -1 is the host.
struct DeviceStream {
  int device = 0;
  int stream = 0;
};

// Scratch device memory for one op call. ops.cpp hands one out, backed by the caching allocator of
// the op's device; every block stays valid until the op returns, and is reused afterwards only by
// work queued later on the same stream.
class Workspace {
 public:
  virtual ~Workspace() = default;
  virtual void* get(size_t bytes) = 0;
};

// `dt` says what the 16-bit pointers hold: pointers typed void* hold f32 when dt is f32, else
// f16/bf16 bits.
class OpTable {
 public:
  virtual ~OpTable() = default;

  // torch.backends.cuda.matmul.allow_tf32: fp32 GEMMs may round their inputs to TF32 (off by
  // default, as PyTorch since 1.12). A table whose GEMMs are exact fp32 keeps it false.
  virtual void set_allow_tf32(bool /*allow*/) {}
  virtual bool allow_tf32() const { return false; }

  // The GEMM library's own scratch memory on `device` (cuBLAS's workspace): how many bytes it
  // wants for the life of the process, 0 for none (the CPU kernels). PyTorch takes it from the
  // device's caching allocator at the device's first GEMM and never gives it back, so
  // memory_allocated counts it; the runtime does the same (Runtime::ensure_gemm_workspace) and
  // hands the block over here before that GEMM runs.
  virtual size_t gemm_workspace_bytes(int /*device*/) { return 0; }
  virtual void set_gemm_workspace(int /*device*/, void* /*ptr*/, size_t /*bytes*/) {}

  // out (B, OC) = inp (B, C) @ weight (OC, C)^T + bias (OC), all of dtype dt, fp32 accumulation,
  // one rounding of (product + bias) to dt.
  virtual void linear_forward(DeviceStream where, void* out, const void* inp, const void* weight,
                              const void* bias, int B, int C, int OC, DType dt) = 0;
  // WRITES dinp (B, C) unless null. accumulate: ADDS into the fp32 dweight (OC, C) and dbias (OC);
  // otherwise WRITES them (the first backward after zero_grad(set_to_none)). For 16-bit dt the
  // products are rounded to dt before they are added, as ref::linear_backward_half.
  // dweight null (fp32, host-accessible backends only): dweight's GEMM is left to the caller
  // (cpu_linear_weight_grad), dinp and dbias as above.
  virtual void linear_backward(DeviceStream where, void* dinp, float* dweight, float* dbias,
                               const void* dout, const void* inp, const void* weight, int B, int C,
                               int OC, DType dt, bool accumulate, Workspace& ws) = 0;
  virtual void relu_forward(DeviceStream where, void* x, int64_t n, DType dt) = 0;
  virtual void relu_backward(DeviceStream where, void* dx, const void* out, int64_t n, DType dt) = 0;
  // f32 <-> f16/bf16, round to nearest even.
  virtual void cast(DeviceStream where, void* out, DType out_dt, const void* in, DType in_dt,
                    int64_t n) = 0;
  // Writes probs (B, V); returns the mean loss on the host (waits for it). Throws furnace::Error
  // "Target t is out of bounds." when a target is outside [0, V).
  virtual float softmax_cross_entropy_forward(DeviceStream where, float* probs, const float* logits,
                                              const int32_t* targets, int B, int V,
                                              Workspace& ws) = 0;
  virtual void softmax_cross_entropy_backward(DeviceStream where, float* dlogits,
                                              const float* probs, const int32_t* targets, int B,
                                              int V, float dloss) = 0;
  // Rows whose first maximum is at the target, on the host (waits for the count).
  virtual int64_t accuracy_count(DeviceStream where, const float* logits, const int32_t* targets,
                                 int B, int V, Workspace& ws) = 0;
  virtual void sgd_momentum_step(DeviceStream where, float* param, const float* grad, float* buf,
                                 int64_t n, float lr, float momentum, float weight_decay,
                                 bool first_step) = 0;
  virtual void adamw_step(DeviceStream where, float* param, const float* grad, float* exp_avg,
                          float* exp_avg_sq, int64_t n, float lr, float beta1, float beta2,
                          float eps, float weight_decay, int64_t step) = 0;
  // One fused pass: found_inf = 1 if any element is inf/NaN; grad *= inv_scale unless it is 1.
  virtual void non_finite_check_and_unscale(DeviceStream where, float* grad, int64_t n,
                                            float inv_scale, float* found_inf) = 0;
  // out = in * alpha (torch.mul by a scalar, each product rounded once); out may be in.
  virtual void mul_scalar(DeviceStream where, float* out, const float* in, float alpha, int64_t n) = 0;
  // out = a + b; out may be a or b.
  virtual void add(DeviceStream where, float* out, const float* a, const float* b, int64_t n) = 0;
  // out = ((terms[0] + terms[1]) + terms[2]) + ...: the roundings of count - 1 adds in that order
  // (count >= 1; out may be terms[0]). Every pointer on where.device.
  virtual void add_n(DeviceStream where, float* out, const float* const* terms, int count,
                     int64_t n) = 0;
  // torch.cat of flat parts: parts[i] (bytes[i] bytes) back to back into out.
  virtual void cat(DeviceStream where, void* out, const void* const* parts, const size_t* bytes,
                   int count) = 0;
};

// The host's table: the CPU kernels on host memory (also what the simulator's table runs).
OpTable& cpu_op_table();

// The host's fp32 weight-gradient GEMM, linear_backward's dweight alone: dweight (OC, C) =
// alpha * dout^T (OC, B) @ inp (B, C), added to dweight when accumulate. With alpha 1 the same
// call (and so the same bits, at the same OpenBLAS thread count) as the table's.
void cpu_linear_weight_grad(float* dweight, const float* dout, const float* inp, int B, int C,
                            int OC, bool accumulate, float alpha = 1.0f);
// The OpenBLAS threads the CPU kernels' GEMMs use now (process-wide).
int cpu_gemm_threads();
// The OpenBLAS kernel set they run ("Cooperlake", "Haswell", ...): OpenBLAS's pick for this CPU at
// load, or OPENBLAS_CORETYPE's where the environment sets it (an AVX-512 CPU told "Haswell" runs
// the step's GEMMs at about half the speed).
std::string cpu_gemm_kernel();
// Whether this CPU has AVX-512 (F, BW, DQ, VL) and that kernel set is not one of OpenBLAS's
// AVX-512 ones (SkylakeX, Cooperlake, SapphireRapids): the GEMMs run narrower than the CPU could.
bool cpu_gemm_kernel_narrower_than_cpu();

// While alive, the CPU kernels' GEMMs use `threads` OpenBLAS threads; the previous count comes back
// at destruction. parallel_apply holds one with 1 while its workers run: k workers each starting a
// multi-threaded GEMM would oversubscribe the cores. Create and destroy it on one thread, while no
// other thread is running ops.
class CpuGemmThreadsScope {
 public:
  explicit CpuGemmThreadsScope(int threads);
  ~CpuGemmThreadsScope();
  CpuGemmThreadsScope(const CpuGemmThreadsScope&) = delete;
  CpuGemmThreadsScope& operator=(const CpuGemmThreadsScope&) = delete;

 private:
  int previous_;
};

}  // namespace furnace
