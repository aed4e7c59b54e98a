// ops/ref: the reference implementations. Plain loops, sums in double, written for clarity.
#include "ops/ref/ref_ops.h"

#include "backend/cpu/adamw_scalars.h"

#include <cmath>
#include <limits>

namespace furnace::ref {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int B,
                    int C, int OC) {
  for (int b = 0; b < B; ++b)
    for (int o = 0; o < OC; ++o) {
      double acc = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; ++c) acc += static_cast<double>(inp[b * C + c]) * weight[o * C + c];
      out[b * OC + o] = static_cast<float>(acc);
    }
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int B, int C, int OC, bool accumulate) {
  if (dinp)
    for (int b = 0; b < B; ++b)
      for (int c = 0; c < C; ++c) {
        double acc = 0;
        for (int o = 0; o < OC; ++o) acc += static_cast<double>(dout[b * OC + o]) * weight[o * C + c];
        dinp[b * C + c] = static_cast<float>(acc);
      }
  for (int o = 0; o < OC; ++o) {
    for (int c = 0; c < C; ++c) {
      double acc = 0;
      for (int b = 0; b < B; ++b) acc += static_cast<double>(dout[b * OC + o]) * inp[b * C + c];
      dweight[o * C + c] = (accumulate ? dweight[o * C + c] : 0.0f) + static_cast<float>(acc);
    }
    double acc = 0;
    for (int b = 0; b < B; ++b) acc += dout[b * OC + o];
    dbias[o] = (accumulate ? dbias[o] : 0.0f) + static_cast<float>(acc);
  }
}

void relu_forward(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (x[i] < 0.0f) x[i] = 0.0f;  // NaN stays NaN, as torch.relu
}

void relu_backward(float* dx, const float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!(out[i] > 0.0f)) dx[i] = 0.0f;
}

float softmax_cross_entropy_forward(float* probs, const float* logits, const int32_t* targets,
                                    int B, int V) {
  double total = 0;
  for (int b = 0; b < B; ++b) {
    const float* row = logits + static_cast<int64_t>(b) * V;
    double maxv = -std::numeric_limits<double>::infinity();
    for (int v = 0; v < V; ++v) maxv = std::max(maxv, static_cast<double>(row[v]));
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - maxv);
    for (int v = 0; v < V; ++v)
      probs[static_cast<int64_t>(b) * V + v] = static_cast<float>(std::exp(row[v] - maxv) / sum);
    total += -(row[targets[b]] - maxv - std::log(sum));
  }
  return static_cast<float>(total / B);
}

void softmax_cross_entropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                    int B, int V, float dloss) {
  const double scale = static_cast<double>(dloss) / B;
  for (int b = 0; b < B; ++b)
    for (int v = 0; v < V; ++v) {
      const int64_t i = static_cast<int64_t>(b) * V + v;
      dlogits[i] = static_cast<float>((probs[i] - (v == targets[b] ? 1.0 : 0.0)) * scale);
    }
}

int64_t accuracy_count(const float* logits, const int32_t* targets, int B, int V) {
  int64_t correct = 0;
  for (int b = 0; b < B; ++b) {
    int best = 0;
    for (int v = 1; v < V; ++v)
      if (logits[static_cast<int64_t>(b) * V + v] > logits[static_cast<int64_t>(b) * V + best]) best = v;
    correct += best == targets[b];
  }
  return correct;
}

void sgd_momentum_step(float* param, const float* grad, float* buf, int64_t n, float lr,
                       float momentum, float weight_decay, bool first_step) {
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (weight_decay != 0.0f) g += weight_decay * param[i];
    if (momentum != 0.0f) {
      buf[i] = first_step ? g : momentum * buf[i] + g;
      g = buf[i];
    }
    param[i] -= lr * g;
  }
}

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  const AdamWScalars s = adamw_scalars(lr, beta1, beta2, eps, weight_decay, step);
  for (int64_t i = 0; i < n; ++i) adamw_element(param[i], grad[i], exp_avg[i], exp_avg_sq[i], s);
}

void non_finite_check_and_unscale(float* grad, int64_t n, float inv_scale, float* found_inf) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(grad[i])) *found_inf = 1.0f;
    if (inv_scale != 1.0f) grad[i] = grad[i] * inv_scale;
  }
}

void mul_scalar(float* out, const float* in, float alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * alpha;
}

void add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_n(float* out, const float* const* terms, int count, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float acc = terms[0][i];
    for (int j = 1; j < count; ++j) acc = acc + terms[j][i];
    out[i] = acc;
  }
}

}  // namespace furnace::ref
