// backend/cpu/cpu_op_table: the op table of host memory, over the CPU kernels of this folder. The
// host's tensors use it, and so does the simulator, whose device memory is host memory (its clock
// is advanced by the ops layer's cost report, not here). Each entry picks the f32 or the 16-bit
// kernel for `dt`; nothing is queued, every entry returns with its work done.
#include <cstddef>
#include <cstring>
#include <strings.h>  // defines: strcasecmp

#include "backend/cpu/cpu_kernels.h"
#include "furnace/error.h"  // defines: FURNACE_CHECK
#include "furnace/op_table.h"

namespace furnace {
namespace {

class CpuOpTable final : public OpTable {
 public:
  void linear_forward(DeviceStream, void* out, const void* inp, const void* weight,
                      const void* bias, int B, int C, int OC, DType dt) override {
    if (is_half(dt))
      cpu::linear_forward_half(u16(out), u16(inp), u16(weight), u16(bias), B, C, OC, dt);
    else
      cpu::linear_forward(f32(out), f32(inp), f32(weight), f32(bias), B, C, OC);
  }

  void linear_backward(DeviceStream, void* dinp, float* dweight, float* dbias, const void* dout,
                       const void* inp, const void* weight, int B, int C, int OC, DType dt,
                       bool accumulate, Workspace&) override {
    if (is_half(dt))
      cpu::linear_backward_half(u16(dinp), dweight, dbias, u16(dout), u16(inp), u16(weight), B, C,
                                OC, dt, accumulate);
    else if (!dweight) {  // the weight gradient left to the caller (see OpTable)
      if (dinp) cpu::linear_input_grad(f32(dinp), f32(dout), f32(weight), B, C, OC);
      cpu::linear_bias_grad(dbias, f32(dout), B, OC, accumulate);
    } else {
      cpu::linear_backward(f32(dinp), dweight, dbias, f32(dout), f32(inp), f32(weight), B, C, OC,
                           accumulate);
    }
  }

  void relu_forward(DeviceStream, void* x, int64_t n, DType dt) override {
    if (is_half(dt))
      cpu::relu_forward_half(u16(x), n, dt);
    else
      cpu::relu_forward(f32(x), n);
  }

  void relu_backward(DeviceStream, void* dx, const void* out, int64_t n, DType dt) override {
    if (is_half(dt))
      cpu::relu_backward_half(u16(dx), u16(out), n, dt);
    else
      cpu::relu_backward(f32(dx), f32(out), n);
  }

  void cast(DeviceStream, void* out, DType out_dt, const void* in, DType in_dt, int64_t n) override {
    if (in_dt == DType::f32 && is_half(out_dt))
      cpu::cast_to_half(u16(out), f32(in), n, out_dt);
    else if (is_half(in_dt) && out_dt == DType::f32)
      cpu::cast_from_half(f32(out), u16(in), n, in_dt);
    else
      FURNACE_FAIL() << "cast: cannot cast " << dtype_name(in_dt) << " to " << dtype_name(out_dt);
  }

  float softmax_cross_entropy_forward(DeviceStream, float* probs, const float* logits,
                                      const int32_t* targets, int B, int V, Workspace&) override {
    for (int b = 0; b < B; ++b)
      FURNACE_CHECK(targets[b] >= 0 && targets[b] < V) << "Target " << targets[b] << " is out of bounds.";
    return cpu::softmax_cross_entropy_forward(probs, logits, targets, B, V);
  }

  void softmax_cross_entropy_backward(DeviceStream, float* dlogits, const float* probs,
                                      const int32_t* targets, int B, int V, float dloss) override {
    cpu::softmax_cross_entropy_backward(dlogits, probs, targets, B, V, dloss);
  }

  int64_t accuracy_count(DeviceStream, const float* logits, const int32_t* targets, int B, int V,
                         Workspace&) override {
    return cpu::accuracy_count(logits, targets, B, V);
  }

  void sgd_momentum_step(DeviceStream, float* param, const float* grad, float* buf, int64_t n,
                         float lr, float momentum, float weight_decay, bool first_step) override {
    cpu::sgd_momentum_step(param, grad, buf, n, lr, momentum, weight_decay, first_step);
  }

  void adamw_step(DeviceStream, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                  int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  int64_t step) override {
    cpu::adamw_step(param, grad, exp_avg, exp_avg_sq, n, lr, beta1, beta2, eps, weight_decay, step);
  }

  void non_finite_check_and_unscale(DeviceStream, float* grad, int64_t n, float inv_scale,
                                    float* found_inf) override {
    cpu::non_finite_check_and_unscale(grad, n, inv_scale, found_inf);
  }

  void mul_scalar(DeviceStream, float* out, const float* in, float alpha, int64_t n) override {
    cpu::mul_scalar(out, in, alpha, n);
  }

  void add(DeviceStream, float* out, const float* a, const float* b, int64_t n) override {
    cpu::add(out, a, b, n);
  }

  void add_n(DeviceStream, float* out, const float* const* terms, int count, int64_t n) override {
    cpu::add_n(out, terms, count, n);
  }

  void cat(DeviceStream, void* out, const void* const* parts, const size_t* bytes,
           int count) override {
    auto* at = static_cast<std::byte*>(out);
    for (int i = 0; i < count; ++i) {
      if (bytes[i] > 0) std::memcpy(at, parts[i], bytes[i]);
      at += bytes[i];
    }
  }

 private:
  static float* f32(void* p) { return static_cast<float*>(p); }
  static const float* f32(const void* p) { return static_cast<const float*>(p); }
  static uint16_t* u16(void* p) { return static_cast<uint16_t*>(p); }
  static const uint16_t* u16(const void* p) { return static_cast<const uint16_t*>(p); }
};

}  // namespace

OpTable& cpu_op_table() {
  static CpuOpTable table;  // stateless: one for the whole process
  return table;
}

void cpu_linear_weight_grad(float* dweight, const float* dout, const float* inp, int B, int C,
                            int OC, bool accumulate, float alpha) {
  cpu::linear_weight_grad(dweight, dout, inp, B, C, OC, accumulate, alpha);
}

int cpu_gemm_threads() { return cpu::blas_threads(); }

std::string cpu_gemm_kernel() { return cpu::blas_kernel(); }

bool cpu_gemm_kernel_narrower_than_cpu() {
#if defined(__x86_64__)
  const std::string kernel = cpu_gemm_kernel();
  for (const char* wide : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (strcasecmp(kernel.c_str(), wide) == 0) return false;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

CpuGemmThreadsScope::CpuGemmThreadsScope(int threads) : previous_(cpu::blas_threads()) {
  if (threads != previous_) cpu::set_blas_threads(threads);
}

CpuGemmThreadsScope::~CpuGemmThreadsScope() {
  if (cpu::blas_threads() != previous_) cpu::set_blas_threads(previous_);
}

}  // namespace furnace
