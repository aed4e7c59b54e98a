// backend/cpu/cpu_kernels: the CPU kernels behind the host's and the simulator's op table.
// GEMMs go to OpenBLAS; the rest are simple loops the compiler vectorises. Results match ops/ref
// within fp32 reassociation (tests/ops/test_ops.cpp).
#include "backend/cpu/cpu_kernels.h"

#include "backend/cpu/adamw_scalars.h"

#include <cblas.h>

#include <algorithm>
#include <bit>  // defines: std::bit_cast
#include <cmath>
#include <cstring>
#include <limits>

namespace furnace::cpu {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                    int C, int OC) {
  // out = bias (broadcast over rows), then out += inp @ weight^T in one sgemm.
  float beta = 0.0f;
  if (bias) {
    for (int b = 0; b < B; ++b) std::memcpy(out + static_cast<int64_t>(b) * OC, bias, sizeof(float) * OC);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, C, 1.0f, inp, C, weight, C, beta,
              out, OC);
}

void linear_input_grad(float* dinp, const float* dout, const float* weight, int B, int C, int OC) {
  // dinp (B, C) = dout (B, OC) @ weight (OC, C)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, C, OC, 1.0f, dout, OC, weight, C, 0.0f,
              dinp, C);
}

void linear_weight_grad(float* dweight, const float* dout, const float* inp, int B, int C, int OC,
                        bool accumulate, float alpha) {
  // dweight (OC, C) += alpha * dout^T (OC, B) @ inp (B, C); = without accumulate (beta 0: the same
  // bits as adding to zeros, without writing the zeros first)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, B, alpha, dout, OC, inp, C,
              accumulate ? 1.0f : 0.0f, dweight, C);
}

void linear_bias_grad(float* dbias, const float* dout, int B, int OC, bool accumulate) {
  if (!accumulate) std::fill(dbias, dbias + OC, 0.0f);
  for (int b = 0; b < B; ++b) {
    const float* row = dout + static_cast<int64_t>(b) * OC;
    for (int o = 0; o < OC; ++o) dbias[o] += row[o];
  }
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int B, int C, int OC, bool accumulate) {
  if (dinp) linear_input_grad(dinp, dout, weight, B, C, OC);
  linear_weight_grad(dweight, dout, inp, B, C, OC, accumulate);
  linear_bias_grad(dbias, dout, B, OC, accumulate);
}

void relu_forward(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] < 0.0f ? 0.0f : x[i];  // NaN stays NaN, as torch.relu
}

void relu_backward(float* dx, const float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = out[i] > 0.0f ? dx[i] : 0.0f;
}

float softmax_cross_entropy_forward(float* probs, const float* logits, const int32_t* targets,
                                    int B, int V) {
  double total = 0;
  for (int b = 0; b < B; ++b) {
    const float* row = logits + static_cast<int64_t>(b) * V;
    float* p = probs + static_cast<int64_t>(b) * V;
    float maxv = -std::numeric_limits<float>::infinity();
    for (int v = 0; v < V; ++v) maxv = std::max(maxv, row[v]);
    float sum = 0;
    for (int v = 0; v < V; ++v) {
      p[v] = std::exp(row[v] - maxv);
      sum += p[v];
    }
    const float inv = 1.0f / sum;
    for (int v = 0; v < V; ++v) p[v] *= inv;
    total += -(static_cast<double>(row[targets[b]]) - maxv - std::log(static_cast<double>(sum)));
  }
  return static_cast<float>(total / B);
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                    int B, int V, float dloss) {
  const float scale = dloss / static_cast<float>(B);
  const int64_t n = static_cast<int64_t>(B) * V;
  for (int64_t i = 0; i < n; ++i) dlogits[i] = probs[i] * scale;
  for (int b = 0; b < B; ++b) dlogits[static_cast<int64_t>(b) * V + targets[b]] -= scale;
}

int64_t accuracy_count(const float* logits, const int32_t* targets, int B, int V) {
  int64_t correct = 0;
  for (int b = 0; b < B; ++b) {
    const float* row = logits + static_cast<int64_t>(b) * V;
    correct += (std::max_element(row, row + V) - row) == targets[b];
  }
  return correct;
}

void sgd_momentum_step(float* param, const float* grad, float* buf, int64_t n, float lr,
                       float momentum, float weight_decay, bool first_step) {
  if (momentum == 0.0f) {
    for (int64_t i = 0; i < n; ++i)
      param[i] -= lr * (weight_decay != 0.0f ? grad[i] + weight_decay * param[i] : grad[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float g = weight_decay != 0.0f ? grad[i] + weight_decay * param[i] : grad[i];
    const float b = first_step ? g : momentum * buf[i] + g;
    buf[i] = b;
    param[i] -= lr * b;
  }
}

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  // The per-element update is already one pass with no reduction: the same code as the reference.
  const AdamWScalars s = adamw_scalars(lr, beta1, beta2, eps, weight_decay, step);
  for (int64_t i = 0; i < n; ++i) adamw_element(param[i], grad[i], exp_avg[i], exp_avg_sq[i], s);
}

void non_finite_check_and_unscale(float* grad, int64_t n, float inv_scale, float* found_inf) {
  // One pass, branch-free in the loop: a value is inf or NaN exactly when its exponent bits are
  // all ones. An integer OR has no order to keep, so the compiler vectorises it (a float sum of
  // x - x did the same test one dependent add at a time).
  uint32_t non_finite = 0;
  auto exponent_all_ones = [](float x) {
    return static_cast<uint32_t>((std::bit_cast<uint32_t>(x) & 0x7f800000u) == 0x7f800000u);
  };
  if (inv_scale == 1.0f) {
    for (int64_t i = 0; i < n; ++i) non_finite |= exponent_all_ones(grad[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      non_finite |= exponent_all_ones(grad[i]);
      grad[i] *= inv_scale;
    }
  }
  if (non_finite) *found_inf = 1.0f;
}

int blas_threads() { return openblas_get_num_threads(); }
std::string blas_kernel() {
  const char* name = openblas_get_corename();
  return name ? name : "unknown";
}
void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

void mul_scalar(float* out, const float* in, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * alpha;
}

void add(float* out, const float* a, const float* b, int64_t n) {
  // Element i is read before it is written, so out may alias a or b.
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_n(float* out, const float* const* terms, int count, int64_t n) {
  // Block by block, so each block of `out` stays in L1 while the terms are added to it in order:
  // one pass over memory, the same roundings as adding whole tensors one after another.
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t len = std::min(kBlock, n - start);
    float* o = out + start;
    if (count == 1) {
      if (o != terms[0] + start) std::memcpy(o, terms[0] + start, sizeof(float) * static_cast<size_t>(len));
      continue;
    }
    add(o, terms[0] + start, terms[1] + start, len);
    for (int j = 2; j < count; ++j) add(o, o, terms[j] + start, len);
  }
}

}  // namespace furnace::cpu
