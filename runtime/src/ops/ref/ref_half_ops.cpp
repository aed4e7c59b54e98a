// ops/ref, autocast part: the 16-bit ops written element by element, accumulating in double and
// rounding once per output, so they define what the fast versions must produce.
#include <vector>

#include "ops/ref/ref_ops.h"

namespace furnace::ref {
namespace {
float to_f32(uint16_t h, DType dt) { return dt == DType::bf16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h); }
uint16_t to_half(float f, DType dt) { return dt == DType::bf16 ? f32_to_bf16_bits(f) : f32_to_f16_bits(f); }
}  // namespace

void cast_to_half(uint16_t* out, const float* in, int64_t n, DType dt) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_half(in[i], dt);
}

void cast_from_half(float* out, const uint16_t* in, int64_t n, DType dt) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_f32(in[i], dt);
}

void linear_forward_half(uint16_t* out, const uint16_t* inp, const uint16_t* weight,
                         const uint16_t* bias, int B, int C, int OC, DType dt) {
  for (int b = 0; b < B; ++b)
    for (int o = 0; o < OC; ++o) {
      double acc = 0;
      for (int c = 0; c < C; ++c)
        acc += static_cast<double>(to_f32(inp[b * C + c], dt)) * to_f32(weight[o * C + c], dt);
      out[b * OC + o] = to_half(static_cast<float>(acc + (bias ? to_f32(bias[o], dt) : 0.0f)), dt);
    }
}

void linear_backward_half(uint16_t* dinp, float* dweight, float* dbias, const uint16_t* dout,
                          const uint16_t* inp, const uint16_t* weight, int B, int C, int OC,
                          DType dt, bool accumulate) {
  if (dinp)
    for (int b = 0; b < B; ++b)
      for (int c = 0; c < C; ++c) {
        double acc = 0;
        for (int o = 0; o < OC; ++o)
          acc += static_cast<double>(to_f32(dout[b * OC + o], dt)) * to_f32(weight[o * C + c], dt);
        dinp[b * C + c] = to_half(static_cast<float>(acc), dt);
      }
  for (int o = 0; o < OC; ++o) {
    for (int c = 0; c < C; ++c) {
      double acc = 0;
      for (int b = 0; b < B; ++b)
        acc += static_cast<double>(to_f32(dout[b * OC + o], dt)) * to_f32(inp[b * C + c], dt);
      const float g = to_f32(to_half(static_cast<float>(acc), dt), dt);
      dweight[o * C + c] = (accumulate ? dweight[o * C + c] : 0.0f) + g;
    }
    double acc = 0;
    for (int b = 0; b < B; ++b) acc += to_f32(dout[b * OC + o], dt);
    dbias[o] = (accumulate ? dbias[o] : 0.0f) + to_f32(to_half(static_cast<float>(acc), dt), dt);
  }
}

void relu_forward_half(uint16_t* x, int64_t n, DType dt) {
  for (int64_t i = 0; i < n; ++i)
    if (to_f32(x[i], dt) < 0.0f) x[i] = 0;
}

void relu_backward_half(uint16_t* dx, const uint16_t* out, int64_t n, DType dt) {
  for (int64_t i = 0; i < n; ++i)
    if (!(to_f32(out[i], dt) > 0.0f)) dx[i] = 0;
}

}  // namespace furnace::ref
