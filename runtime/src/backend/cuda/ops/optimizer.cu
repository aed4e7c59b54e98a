// backend/cuda/ops/optimizer: SGD with momentum and AdamW, one thread per element (grid-stride).
#include "backend/cuda/ops/optimizer.cuh"

#include "backend/cuda/ops/launch.cuh"

namespace furnace::cuda {
namespace {

// ---- kernels ------------------------------------------------------------------------------------

__global__ void sgd_momentum_kernel(float* param, const float* grad, float* buf, int64_t n, float lr,
                                    float momentum, float weight_decay, bool first_step) {
  for (int64_t i : GridStride{n}) {
    float g = grad[i];
    if (weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(weight_decay, param[i]));
    if (momentum != 0.0f) {
      const float b = first_step ? g : __fadd_rn(__fmul_rn(momentum, buf[i]), g);
      buf[i] = b;
      g = b;
    }
    param[i] = __fsub_rn(param[i], __fmul_rn(lr, g));
  }
}

__global__ void adamw_kernel(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                             int64_t n, AdamWScalars s) {
  for (int64_t i : GridStride{n}) {
    const float g = grad[i];
    const float p = __fmul_rn(param[i], s.decay);                       // param.mul_(1 - lr * wd)
    float m = exp_avg[i];                                               // exp_avg.lerp_(g, 1 - beta1)
    const float diff = __fsub_rn(g, m);
    m = s.avg_weight < 0.5f ? __fadd_rn(m, __fmul_rn(s.avg_weight, diff))
                            : __fsub_rn(g, __fmul_rn(diff, __fsub_rn(1.0f, s.avg_weight)));
    float v = __fmul_rn(exp_avg_sq[i], s.beta2);                        // exp_avg_sq.mul_(beta2)
    v = __fadd_rn(v, __fmul_rn(__fmul_rn(s.sq_weight, g), g));          // .addcmul_(g, g, 1 - beta2)
    const float denom =                                                 // sqrt(v) / bc2_sqrt + eps
        __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias_correction2_sqrt), s.eps);
    param[i] = __fadd_rn(p, __fmul_rn(-s.step_size, __fdiv_rn(m, denom)));  // addcdiv_
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

void sgd_momentum_step(cudaStream_t stream, float* param, const float* grad, float* buf, int64_t n,
                       float lr, float momentum, float weight_decay, bool first_step,
                       int64_t max_blocks) {
  FURNACE_CHECK(momentum == 0.0f || buf != nullptr) << "sgd_momentum_step: no momentum buffer";
  launch_elementwise(stream, n, max_blocks, sgd_momentum_kernel, param, grad, buf, n, lr, momentum,
                     weight_decay, first_step);
}

void adamw_step(cudaStream_t stream, float* param, const float* grad, float* exp_avg,
                float* exp_avg_sq, int64_t n, const AdamWScalars& s, int64_t max_blocks) {
  launch_elementwise(stream, n, max_blocks, adamw_kernel, param, grad, exp_avg, exp_avg_sq, n, s);
}

}  // namespace furnace::cuda
