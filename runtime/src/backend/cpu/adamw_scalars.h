// ops/adamw_scalars: the per-step scalars of torch.optim.AdamW (the single-tensor path), shared by
// the ref, sim and cuda implementations so they compute the same numbers. PyTorch computes them
// from Python floats (double) and the tensor ops then use them as float.
#pragma once

#include <cmath>
#include <cstdint>

namespace furnace {

struct AdamWScalars {
  float decay;               // 1 - lr * weight_decay: param.mul_(decay)
  float avg_weight;          // 1 - beta1: exp_avg.lerp_(grad, avg_weight)
  float beta2;               // exp_avg_sq.mul_(beta2)
  float sq_weight;           // 1 - beta2: .addcmul_(grad, grad, value=sq_weight)
  float step_size;           // lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
};

// `step` is the 1-based step count after this update (PyTorch increments it first).
inline AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps,
                                  float weight_decay, int64_t step) {
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  AdamWScalars s;
  s.decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);
  s.avg_weight = static_cast<float>(1.0 - static_cast<double>(beta1));
  s.beta2 = beta2;
  s.sq_weight = static_cast<float>(1.0 - static_cast<double>(beta2));
  s.step_size = static_cast<float>(static_cast<double>(lr) / bias_correction1);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = eps;
  return s;
}

// One element of the update on the CPU (ref and sim), the float operations of PyTorch's tensor ops
// in their order: param.mul_(decay); exp_avg.lerp_(grad, avg_weight); exp_avg_sq.mul_(beta2)
// .addcmul_(grad, grad, sq_weight); denom = exp_avg_sq.sqrt() / bias_correction2_sqrt + eps;
// param.addcdiv_(exp_avg, denom, -step_size). (ISO C++ mode: the compiler fuses no multiply-add.)
inline void adamw_element(float& param, float grad, float& exp_avg, float& exp_avg_sq,
                          const AdamWScalars& s) {
  float p = param * s.decay;
  const float diff = grad - exp_avg;
  const float m = s.avg_weight < 0.5f ? exp_avg + s.avg_weight * diff
                                      : grad - diff * (1.0f - s.avg_weight);  // ATen's lerp
  const float v = exp_avg_sq * s.beta2 + s.sq_weight * grad * grad;
  const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
  p = p + -s.step_size * (m / denom);
  param = p;
  exp_avg = m;
  exp_avg_sq = v;
}

}  // namespace furnace
