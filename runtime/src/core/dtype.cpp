// Element types and exact f32 <-> f16/bf16 conversions, done with integer bit manipulation only.
// Not here: tensors, casts over tensors (ops/cast), or any use of hardware conversion instructions.
// The results match x86 F16C (_cvtss_sh with round-to-nearest, _cvtsh_ss) and CUDA's __float2half_rn /
// __float2bfloat16_rn bit for bit, NaN payloads included; tests/core/test_dtype.cpp checks that.
#include "furnace/dtype.h"  // defines: DType, dtype_size, dtype_name, f32/f16/bf16 conversions

#include <bit>  // defines: std::bit_cast

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>  // defines: the F16C conversions, AVX2 integer operations
#endif

#include "furnace/error.h"  // defines: FURNACE_ASSERT

namespace furnace {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::u8: return 1;
  }
  FURNACE_ASSERT(false) << "unknown DType " << static_cast<int>(t);
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i32: return "int32";
    case DType::u8: return "uint8";
  }
  FURNACE_ASSERT(false) << "unknown DType " << static_cast<int>(t);
}

namespace {
// f32 layout: sign 1 | exponent 8 (bias 127) | mantissa 23.
// f16 layout: sign 1 | exponent 5 (bias 15)  | mantissa 10.
constexpr uint32_t kF32AbsMask = 0x7fffffffu;
constexpr uint32_t kF32Inf = 0x7f800000u;
constexpr uint32_t kF32Quiet = 0x00400000u;
constexpr uint16_t kF16Inf = 0x7c00u;
constexpr uint16_t kF16Quiet = 0x0200u;
constexpr uint16_t kBF16Quiet = 0x0040u;

// Shifts `m` right by `s` (1..31) bits, rounding to nearest with ties to even.
uint32_t shift_round_even(uint32_t m, unsigned s) {
  const uint32_t q = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u);
  const uint32_t half = 1u << (s - 1);
  return (rem > half || (rem == half && (q & 1u))) ? q + 1u : q;
}
}  // namespace

uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & kF32AbsMask;

  if (abs > kF32Inf) {  // NaN: quiet it, keep the sign and the top 9 payload bits (as F16C does)
    return static_cast<uint16_t>(sign | kF16Inf | kF16Quiet | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x47800000u) return sign | kF16Inf;  // >= 65536 (and inf): beyond any rounding

  const uint32_t e = abs >> 23;  // biased f32 exponent
  if (e >= 113) {
    // Normal f16 range [2^-14, 65536). Rebias (127 -> 15) and round away 13 mantissa bits; a carry
    // out of the mantissa bumps the exponent, and one out of exponent 30 lands exactly on inf.
    return static_cast<uint16_t>(sign | shift_round_even(abs - (112u << 23), 13));
  }
  if (e < 102) return sign;  // below 2^-25: rounds to (signed) zero, f32 subnormals included

  // Subnormal f16 result: value = m * 2^(e-150), in units of 2^-24 that is m >> (126 - e).
  // Rounding 0x3ff up gives 0x400, the smallest normal, which is the right answer.
  const uint32_t m = (abs & 0x007fffffu) | 0x00800000u;
  return static_cast<uint16_t>(sign | shift_round_even(m, 126 - e));
}

float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;

  if (exp == 0x1f) {  // inf, or NaN (quieted like F16C, payload kept)
    const uint32_t nan_quiet = mant ? kF32Quiet : 0u;
    return std::bit_cast<float>(sign | kF32Inf | nan_quiet | (mant << 13));
  }
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);

  // Subnormal f16: mant * 2^-24. Normalise so the leading 1 sits at bit 10.
  uint32_t e = 113;  // f32 biased exponent of 2^-14, decremented per shift
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t f32_to_bf16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & kF32AbsMask) > kF32Inf) return static_cast<uint16_t>((x >> 16) | kBF16Quiet);
  // Round to nearest even on the top 16 bits; a carry into the exponent reaches inf on its own.
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

float bf16_bits_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Bulk f16 conversions use the CPU's F16C unit when it has one (8 values an instruction; it
// rounds to nearest even and quiets NaNs exactly as the scalar code above, which the tests check
// over every bit pattern), and the scalar code otherwise and for the tail.
#if defined(__x86_64__) && defined(__GNUC__)
namespace {
bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

__attribute__((target("f16c,avx"))) size_t f32_to_f16_f16c(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  return i;
}

__attribute__((target("f16c,avx"))) size_t f16_to_f32_f16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  return i;
}
}  // namespace
#endif

void f32_to_f16(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_f16c()) i = f32_to_f16_f16c(src, dst, n);
#endif
  for (; i < n; ++i) dst[i] = f32_to_f16_bits(src[i]);
}

void f16_to_f32(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_f16c()) i = f16_to_f32_f16c(src, dst, n);
#endif
  for (; i < n; ++i) dst[i] = f16_bits_to_f32(src[i]);
}

// Bulk bf16 conversions with AVX2 integer instructions, 8 values at a time: the same integer
// rounding as f32_to_bf16_bits (the hardware's VCVTNEPS2BF16 flushes subnormals, so it cannot be
// used), selected per lane instead of branching on NaN.
#if defined(__x86_64__) && defined(__GNUC__)
namespace {
bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

__attribute__((target("avx2"))) size_t f32_to_bf16_avx2(const float* src, uint16_t* dst, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(static_cast<int>(kF32AbsMask));
  const __m256i inf = _mm256_set1_epi32(static_cast<int>(kF32Inf));
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(kBF16Quiet);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i out[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8 * h));
      const __m256i top = _mm256_srli_epi32(x, 16);
      const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), _mm256_and_si256(top, one)), 16);
      // |x| > inf as signed 32-bit integers: both sides are below 2^31.
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
      out[h] = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, quiet), nan);
    }
    // Pack the two halves' 32-bit lanes (all below 2^16) to 16 bits; packus interleaves 128-bit
    // lanes, which the permute puts back in order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(out[0], out[1]), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  return i;
}

__attribute__((target("avx2"))) size_t bf16_to_f32_avx2(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(wide, 16));
  }
  return i;
}
}  // namespace
#endif

void f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2()) i = f32_to_bf16_avx2(src, dst, n);
#endif
  for (; i < n; ++i) dst[i] = f32_to_bf16_bits(src[i]);
}

void bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2()) i = bf16_to_f32_avx2(src, dst, n);
#endif
  for (; i < n; ++i) dst[i] = bf16_bits_to_f32(src[i]);
}

}  // namespace furnace
