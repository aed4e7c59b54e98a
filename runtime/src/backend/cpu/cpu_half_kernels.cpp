// backend/cpu, autocast part: 16-bit tensors are widened to fp32 scratch (exact), multiplied with
// OpenBLAS sgemm (16-bit products are exact in fp32, sums accumulate in fp32 as on tensor cores)
// and rounded back once per output element with the exact conversions from core/dtype.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_kernels.h"

namespace furnace::cpu {
namespace {

// Per-thread scratch, so DataParallel workers never share it and steady state never allocates.
std::vector<float>& scratch(int slot, size_t n) {
  thread_local std::vector<float> buffers[4];
  std::vector<float>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b;
}

void widen(float* out, const uint16_t* in, int64_t n, DType dt) {
  if (dt == DType::bf16)
    bf16_to_f32(in, out, static_cast<size_t>(n));
  else
    f16_to_f32(in, out, static_cast<size_t>(n));
}

void narrow(uint16_t* out, const float* in, int64_t n, DType dt) {
  if (dt == DType::bf16)
    f32_to_bf16(in, out, static_cast<size_t>(n));
  else
    f32_to_f16(in, out, static_cast<size_t>(n));
}

// master[i] = x[i] rounded to the 16-bit type, added to master[i] when accumulating: through
// small buffers on the stack, a chunk at a time, so the rounding's passes stay in L1 and the
// fp32 scratch is read once.
void add_rounded(float* master, const float* x, int64_t n, DType dt, bool accumulate) {
  constexpr int64_t kChunk = 2048;
  uint16_t h[kChunk];
  float r[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t k = std::min(kChunk, n - i);
    narrow(h, x + i, k, dt);
    if (!accumulate) {
      widen(master + i, h, k, dt);
      continue;
    }
    widen(r, h, k, dt);
    for (int64_t j = 0; j < k; ++j) master[i + j] += r[j];
  }
}

}  // namespace

void cast_to_half(uint16_t* out, const float* in, int64_t n, DType dt) { narrow(out, in, n, dt); }
void cast_from_half(float* out, const uint16_t* in, int64_t n, DType dt) { widen(out, in, n, dt); }

void linear_forward_half(uint16_t* out, const uint16_t* inp, const uint16_t* weight,
                         const uint16_t* bias, int B, int C, int OC, DType dt) {
  const size_t nin = static_cast<size_t>(B) * C, nw = static_cast<size_t>(OC) * C,
               nout = static_cast<size_t>(B) * OC;
  float* x = scratch(0, nin).data();
  float* w = scratch(1, nw).data();
  float* y = scratch(2, nout).data();
  widen(x, inp, static_cast<int64_t>(nin), dt);
  widen(w, weight, static_cast<int64_t>(nw), dt);
  float* b = nullptr;
  if (bias) {
    b = scratch(3, static_cast<size_t>(OC)).data();
    widen(b, bias, OC, dt);
  }
  linear_forward(y, x, w, b, B, C, OC);
  narrow(out, y, static_cast<int64_t>(nout), dt);
}

void linear_backward_half(uint16_t* dinp, float* dweight, float* dbias, const uint16_t* dout,
                          const uint16_t* inp, const uint16_t* weight, int B, int C, int OC,
                          DType dt, bool accumulate) {
  const size_t nin = static_cast<size_t>(B) * C, nw = static_cast<size_t>(OC) * C,
               nout = static_cast<size_t>(B) * OC;
  float* g = scratch(0, nout).data();
  float* x = scratch(1, nin).data();
  widen(g, dout, static_cast<int64_t>(nout), dt);
  if (dinp) {  // the first layer has none, and its weight is the largest: widened only if needed
    float* w = scratch(2, nw).data();
    widen(w, weight, static_cast<int64_t>(nw), dt);
    float* dx = scratch(3, nin).data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, C, OC, 1.0f, g, OC, w, C, 0.0f, dx, C);
    narrow(dinp, dx, static_cast<int64_t>(nin), dt);
  }
  // The 16-bit weight gradient, rounded, then accumulated into the fp32 master gradient.
  widen(x, inp, static_cast<int64_t>(nin), dt);
  float* dw = scratch(2, nw).data();  // where the widened weight was, if it was
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, B, 1.0f, g, OC, x, C, 0.0f, dw, C);
  add_rounded(dweight, dw, static_cast<int64_t>(nw), dt, accumulate);
  float* db = scratch(3, static_cast<size_t>(OC)).data();
  for (int o = 0; o < OC; ++o) db[o] = 0.0f;
  for (int bi = 0; bi < B; ++bi)
    for (int o = 0; o < OC; ++o) db[o] += g[static_cast<size_t>(bi) * OC + o];
  if (!accumulate) std::fill(dbias, dbias + OC, 0.0f);  // 0 + (-0) is +0, as it always was here
  add_rounded(dbias, db, OC, dt, true);
}

// Both formats keep the sign in the top bit; a NaN has an all-ones exponent and a non-zero
// mantissa, i.e. its magnitude bits exceed those of inf.
namespace {
uint16_t inf_bits(DType dt) { return dt == DType::bf16 ? 0x7f80u : 0x7c00u; }
}  // namespace

// Both loops are branch-free selects, which the compiler vectorises.
void relu_forward_half(uint16_t* x, int64_t n, DType dt) {
  const uint16_t inf = inf_bits(dt);
  for (int64_t i = 0; i < n; ++i) {  // negative numbers become +0; -0 and NaN stay, as x < 0 says
    const uint16_t v = x[i];
    x[i] = (v > 0x8000u && (v & 0x7fffu) <= inf) ? uint16_t{0} : v;
  }
}

void relu_backward_half(uint16_t* dx, const uint16_t* out, int64_t n, DType dt) {
  const uint16_t inf = inf_bits(dt);
  for (int64_t i = 0; i < n; ++i) {  // positive: sign clear, not zero, not NaN (0 < bits <= inf)
    const uint16_t o = out[i];
    dx[i] = (o != 0 && o <= inf) ? dx[i] : uint16_t{0};
  }
}

}  // namespace furnace::cpu
