// backend/cuda/ops/cuda_ops: CudaOps, the cuda backend's OpTable (furnace/op_table.h). Each entry makes the op's device
// current, takes the device's compute stream, wraps its launches in a trace span named as the ops
// layer reports the kernel (so the span gets its flops and bytes), and calls the launchers.
// Not here: the checks (ops/ops.cpp, before any entry is called), the kernels (one .cu per family).
#include "backend/cuda/ops/cuda_ops.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops/amp.cuh"
#include "backend/cuda/ops/cublas_workspace_size.h"
#include "backend/cuda/ops/elementwise.cuh"
#include "backend/cuda/ops/gemm.cuh"
#include "backend/cuda/ops/launch_config.h"
#include "backend/cuda/ops/loss.cuh"
#include "backend/cuda/ops/optimizer.cuh"
#include "backend/cuda/ops/reductions.cuh"

namespace furnace::cuda {
namespace {

// One op call on one device: the device current, its stream, and its grid cap.
struct On {
  On(DeviceResources& r, DeviceStream w)
      : guard(w.device), where(w), stream(r.stream(w.device)),
        max_blocks(max_blocks_for(r.sm_count(w.device))) {}
  DeviceGuard guard;
  DeviceStream where;
  cudaStream_t stream;
  int64_t max_blocks;
};

// Copies a small result to the host and waits for it (.item()), as a d2h copy in the trace.
template <class T>
T read_back(DeviceResources& r, const On& on, const T* device_value) {
  T host{};
  {
    ScopedSpan span(r.events(), on.where.device, on.stream, on.where.stream, "d2h", EventKind::copy,
                    sizeof(T), /*wants_cost=*/false);
    FURNACE_CUDA_CHECK(cudaMemcpyAsync(&host, device_value, sizeof(T), cudaMemcpyDeviceToHost, on.stream));
  }
  FURNACE_CUDA_CHECK(cudaStreamSynchronize(on.stream));
  return host;
}

// Linear's tensors, so each GEMM takes its A and B as its plan names them (gemm_plan.h, tested on
// the CPU against ops/ref).
struct LinearOperands {
  const void* inp;
  const void* weight;
  const void* dout;
  const void* of(GemmOperand o) const {
    return o == GemmOperand::inp ? inp : o == GemmOperand::weight ? weight : dout;
  }
};

class CudaOps final : public OpTable {
 public:
  CudaOps(DeviceResources& r, int device_count)
      : r_(r), workspaces_(static_cast<size_t>(device_count)) {}

  void set_allow_tf32(bool allow) override { tf32_.store(allow); }
  bool allow_tf32() const override { return tf32_.load(); }

  // PyTorch's size for the device's compute capability and CUBLAS_WORKSPACE_CONFIG, read when the
  // runtime asks (once per device, before its first GEMM).
  size_t gemm_workspace_bytes(int device) override {
    int major = 0, minor = 0;
    FURNACE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    FURNACE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    const char* config = std::getenv("CUBLAS_WORKSPACE_CONFIG");
    const CublasWorkspaceSize size =
        cublas_workspace_size(major, minor, config ? std::optional<std::string>(config) : std::nullopt);
    if (!size.warning.empty() && !warned_.exchange(true))
      std::fprintf(stderr, "UserWarning: %s\n", size.warning.c_str());
    return size.bytes;
  }
  void set_gemm_workspace(int device, void* ptr, size_t bytes) override {
    FURNACE_ASSERT(device >= 0 && static_cast<size_t>(device) < workspaces_.size()) << "cuda:" << device;
    std::lock_guard<std::mutex> lock(r_.cublas_mutex(device));
    workspaces_[static_cast<size_t>(device)] = GemmWorkspace{ptr, bytes};
  }

  void linear_forward(DeviceStream w, void* out, const void* inp, const void* weight,
                      const void* bias, int B, int C, int OC, DType dt) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "linear_forward");
    // addmm's way: out starts as the bias on every row, the GEMM adds inp @ W^T with beta = 1, so
    // (product + bias) is rounded to dt once.
    if (bias) broadcast_rows(on.stream, out, bias, B, OC, dt, on.max_blocks);
    std::lock_guard<std::mutex> lock(r_.cublas_mutex(w.device));
    linear_gemm(on, linear_forward_plan(B, C, OC), {inp, weight, nullptr}, out, dt,
                bias ? 1.0f : 0.0f, tf32_.load());
  }

  void linear_backward(DeviceStream w, void* dinp, float* dweight, float* dbias, const void* dout,
                       const void* inp, const void* weight, int B, int C, int OC, DType dt,
                       bool accumulate, Workspace& ws) override {
    On on(r_, w);
    if (!accumulate) {  // the kernels below accumulate: a fresh .grad starts from zeros
      FURNACE_CUDA_CHECK(cudaMemsetAsync(dweight, 0, sizeof(float) * static_cast<size_t>(OC) * C, on.stream));
      FURNACE_CUDA_CHECK(cudaMemsetAsync(dbias, 0, sizeof(float) * static_cast<size_t>(OC), on.stream));
    }
    const LinearOperands operands{inp, weight, dout};
    if (dinp) {  // dinp (B, C) = dout @ W
      ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "linear_backward_dgrad");
      std::lock_guard<std::mutex> lock(r_.cublas_mutex(w.device));
      linear_gemm(on, linear_dgrad_plan(B, C, OC), operands, dinp, dt, 0.0f, tf32_.load());
    }
    {  // dweight (OC, C) += dout^T @ inp
      ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "linear_backward_wgrad");
      const GemmPlan plan = linear_wgrad_plan(B, C, OC);
      if (dt == DType::f32) {
        std::lock_guard<std::mutex> lock(r_.cublas_mutex(w.device));
        linear_gemm(on, plan, operands, dweight, dt, 1.0f, tf32_.load());
      } else {
        // The 16-bit gradient of autocast's weight copy, rounded to dt, then added to the master.
        const int64_t n = static_cast<int64_t>(OC) * C;
        void* grad_half = ws.get(static_cast<size_t>(n) * dtype_size(dt));
        {
          std::lock_guard<std::mutex> lock(r_.cublas_mutex(w.device));
          linear_gemm(on, plan, operands, grad_half, dt, 0.0f, false);
        }
        accumulate_half(on.stream, dweight, grad_half, n, dt, on.max_blocks);
      }
    }
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "bias_backward");
    bias_grad(on.stream, dbias, dout, B, OC, dt);
  }

  void relu_forward(DeviceStream w, void* x, int64_t n, DType dt) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "relu_forward");
    cuda::relu_forward(on.stream, x, n, dt, on.max_blocks);
  }

  void relu_backward(DeviceStream w, void* dx, const void* out, int64_t n, DType dt) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "relu_backward");
    cuda::relu_backward(on.stream, dx, out, n, dt, on.max_blocks);
  }

  void cast(DeviceStream w, void* out, DType out_dt, const void* in, DType in_dt,
            int64_t n) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "cast");
    cuda::cast(on.stream, out, out_dt, in, in_dt, n, on.max_blocks);
  }

  float softmax_cross_entropy_forward(DeviceStream w, float* probs, const float* logits,
                                      const int32_t* targets, int B, int V,
                                      Workspace& ws) override {
    On on(r_, w);
    auto* scalars = static_cast<LossScalars*>(ws.get(sizeof(LossScalars)));
    auto* row_loss = static_cast<float*>(ws.get(sizeof(float) * static_cast<size_t>(B)));
    {
      ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "cross_entropy_forward");
      FURNACE_CUDA_CHECK(cudaMemsetAsync(scalars, 0, sizeof(LossScalars), on.stream));
      softmax_cross_entropy_rows(on.stream, probs, row_loss, logits, targets, B, V, scalars);
      device_sum(on.stream, row_loss, &scalars->sum, B, ws);
    }
    const LossScalars host = read_back(r_, on, scalars);
    FURNACE_CHECK_DEVICE(host.bad == 0, w.device) << "Target " << host.bad_target << " is out of bounds.";
    return static_cast<float>(static_cast<double>(host.sum) / B);
  }

  void softmax_cross_entropy_backward(DeviceStream w, float* dlogits, const float* probs,
                                      const int32_t* targets, int B, int V, float dloss) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "cross_entropy_backward");
    const float scale = static_cast<float>(static_cast<double>(dloss) / B);
    cuda::softmax_cross_entropy_backward(on.stream, dlogits, probs, targets, B, V, scale,
                                         on.max_blocks);
  }

  int64_t accuracy_count(DeviceStream w, const float* logits, const int32_t* targets, int B, int V,
                         Workspace& ws) override {
    On on(r_, w);
    auto* correct = static_cast<int32_t*>(ws.get(sizeof(int32_t) * static_cast<size_t>(B)));
    auto* count = static_cast<int32_t*>(ws.get(sizeof(int32_t)));
    {
      ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "accuracy");
      accuracy_rows(on.stream, correct, logits, targets, B, V, on.max_blocks);
      device_sum(on.stream, correct, count, B, ws);
    }
    return read_back(r_, on, count);
  }

  void sgd_momentum_step(DeviceStream w, float* param, const float* grad, float* buf, int64_t n,
                         float lr, float momentum, float weight_decay, bool first_step) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "sgd_momentum_step");
    cuda::sgd_momentum_step(on.stream, param, grad, buf, n, lr, momentum, weight_decay, first_step,
                            on.max_blocks);
  }

  void adamw_step(DeviceStream w, float* param, const float* grad, float* exp_avg,
                  float* exp_avg_sq, int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int64_t step) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "adamw_step");
    cuda::adamw_step(on.stream, param, grad, exp_avg, exp_avg_sq, n,
                     adamw_scalars(lr, beta1, beta2, eps, weight_decay, step), on.max_blocks);
  }

  void non_finite_check_and_unscale(DeviceStream w, float* grad, int64_t n, float inv_scale,
                                    float* found_inf) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "non_finite_check_and_unscale");
    cuda::non_finite_check_and_unscale(on.stream, grad, n, inv_scale, found_inf, on.max_blocks);
  }

  void mul_scalar(DeviceStream w, float* out, const float* in, float alpha, int64_t n) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "mul");  // ops.cpp reports "mul"
    cuda::mul_scalar(on.stream, out, in, alpha, n, on.max_blocks);
  }

  void add(DeviceStream w, float* out, const float* a, const float* b, int64_t n) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "add");
    cuda::add(on.stream, out, a, b, n, on.max_blocks);
  }

  void add_n(DeviceStream w, float* out, const float* const* terms, int count, int64_t n) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "add");
    // count - 1 adds in order, the roundings of ((t0 + t1) + t2) + ...; one term is a copy.
    if (count == 1 && out != terms[0])
      FURNACE_CUDA_CHECK(cudaMemcpyAsync(out, terms[0], sizeof(float) * static_cast<size_t>(n),
                                         cudaMemcpyDeviceToDevice, on.stream));
    for (int i = 1; i < count; ++i)
      cuda::add(on.stream, out, i == 1 ? terms[0] : out, terms[i], n, on.max_blocks);
  }

  void cat(DeviceStream w, void* out, const void* const* parts, const size_t* bytes,
           int count) override {
    On on(r_, w);
    ScopedSpan span(r_.events(), w.device, on.stream, w.stream, "cat");
    auto* at = static_cast<char*>(out);
    for (int i = 0; i < count; ++i) {  // a device-to-device copy per part, in stream order
      if (bytes[i] > 0)
        FURNACE_CUDA_CHECK(cudaMemcpyAsync(at, parts[i], bytes[i], cudaMemcpyDeviceToDevice, on.stream));
      at += bytes[i];
    }
  }

 private:
  // One of Linear's GEMMs on on.where's device with that device's workspace; the caller holds the
  // device's cuBLAS lock (which also guards its workspace entry). A, B and C all of dt.
  void linear_gemm(const On& on, const GemmPlan& plan, const LinearOperands& operands, void* C,
                   DType dt, float beta, bool allow_tf32) {
    const int d = on.where.device;
    gemm(r_.cublas(d), on.stream, workspaces_[static_cast<size_t>(d)], plan, operands.of(plan.a),
         operands.of(plan.b), C, dt, dt, 1.0f, beta, allow_tf32);
  }

  DeviceResources& r_;
  std::atomic<bool> tf32_{false};
  std::atomic<bool> warned_{false};      // CUBLAS_WORKSPACE_CONFIG's warning, once
  std::vector<GemmWorkspace> workspaces_;  // per device; each under its cuBLAS lock
};

}  // namespace

std::unique_ptr<OpTable> make_cuda_ops(DeviceResources& resources, int device_count) {
  return std::make_unique<CudaOps>(resources, device_count);
}

}  // namespace furnace::cuda
