// Element types and exact f32 <-> f16/bf16 conversions, done with integer bit manipulation only.
// Not here: tensors, casts over tensors (ops/cast), or any use of hardware conversion instructions.
// The results match x86 F16C (_cvtss_sh with round-to-nearest, _cvtsh_ss) and CUDA's __float2half_rn /
// __float2bfloat16_rn bit for bit, NaN payloads included; tests/core/test_dtype.cpp checks that.
#include "furnace/dtype.h"  // defines: DType, dtype_size, dtype_name, f32/f16/bf16 conversions

#include <bit>  // defines: std::bit_cast

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>  // defines: the F16C conversions, AVX2 integer operations
#endif

#include "core/dtype_paths.h"  // defines: conversion::Path, the conversions by path
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

// Bulk conversions: the widest vector path the CPU has (core/dtype_paths.h names them), the scalar
// code otherwise and for the tail. Every vector path rounds to nearest even and quiets NaNs exactly
// as the scalar code above, which the tests check over every 16-bit pattern and every f32 top half
// around the tie, path by path.
//  - f16: F16C (8 lanes an instruction), or AVX-512F's forms of the same instructions (16 lanes,
//    masked tails).
//  - bf16: AVX2 integer instructions (8 lanes) or AVX-512F/BW (16 lanes, masked tails): the same
//    integer rounding as f32_to_bf16_bits, selected per lane instead of branching on NaN (the
//    hardware's VCVTNEPS2BF16 flushes subnormals, so it cannot be used).
#if defined(__x86_64__) && defined(__GNUC__)
namespace {
bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
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

// The lanes of a 16-lane step that hold data: all 16, or the tail's `left`.
inline __mmask16 lanes(size_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

#define FURNACE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))
// GCC 12's AVX-512 headers start each masked intrinsic from an undefined vector written as
// `__m256i __Y = __Y;`, which -Wmaybe-uninitialized then reports once inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

FURNACE_AVX512 size_t f32_to_f16_avx512(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
  return n;
}

FURNACE_AVX512 size_t f16_to_f32_avx512(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
  return n;
}

FURNACE_AVX512 size_t f32_to_bf16_avx512(const float* src, uint16_t* dst, size_t n) {
  const __m512i abs_mask = _mm512_set1_epi32(static_cast<int>(kF32AbsMask));
  const __m512i inf = _mm512_set1_epi32(static_cast<int>(kF32Inf));
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(kBF16Quiet);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512i x = _mm512_maskz_loadu_epi32(m, src + i);
    const __m512i top = _mm512_srli_epi32(x, 16);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, bias), _mm512_and_si512(top, one)), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, abs_mask), inf);
    const __m512i out = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(top, quiet));
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, out);  // every lane is below 2^16: truncation is exact
  }
  return n;
}

FURNACE_AVX512 size_t bf16_to_f32_avx512(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
    _mm512_mask_storeu_epi32(dst + i, m, _mm512_slli_epi32(wide, 16));
  }
  return n;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef FURNACE_AVX512
}  // namespace
#endif

namespace conversion {

namespace {
bool can_run(Path p) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (p == Path::avx2) return has_avx2() && has_f16c();
  if (p == Path::avx512) return has_avx512() && has_f16c();
#endif
  return p == Path::scalar;
}
}  // namespace

std::vector<Path> available_paths() {
  std::vector<Path> out;
  for (Path p : {Path::scalar, Path::avx2, Path::avx512})
    if (can_run(p)) out.push_back(p);
  return out;
}

const char* path_name(Path p) {
  switch (p) {
    case Path::scalar: return "scalar";
    case Path::avx2: return "avx2";
    case Path::avx512: return "avx512";
  }
  return "?";
}

namespace {
// One conversion's loops: the vector ones (each returns how far it got; null without x86) and
// the scalar one for the rest.
template <class In, class Out>
struct Loops {
  size_t (*avx2)(const In*, Out*, size_t);
  size_t (*avx512)(const In*, Out*, size_t);
  Out (*one)(In);
};

// Runs `p`'s vector loop, then the scalar one. A path the CPU lacks is a programmer's error:
// available_paths() says which it has.
template <class In, class Out>
void convert(Path p, const In* src, Out* dst, size_t n, const Loops<In, Out>& loops) {
  size_t i = 0;
  if (p != Path::scalar) {
    FURNACE_ASSERT(can_run(p)) << "no " << path_name(p) << " on this CPU";
    i = (p == Path::avx512 ? loops.avx512 : loops.avx2)(src, dst, n);
  }
  for (; i < n; ++i) dst[i] = loops.one(src[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
constexpr Loops<float, uint16_t> kToF16{f32_to_f16_f16c, f32_to_f16_avx512, f32_to_f16_bits};
constexpr Loops<uint16_t, float> kFromF16{f16_to_f32_f16c, f16_to_f32_avx512, f16_bits_to_f32};
constexpr Loops<float, uint16_t> kToBf16{f32_to_bf16_avx2, f32_to_bf16_avx512, f32_to_bf16_bits};
constexpr Loops<uint16_t, float> kFromBf16{bf16_to_f32_avx2, bf16_to_f32_avx512, bf16_bits_to_f32};
#else
constexpr Loops<float, uint16_t> kToF16{nullptr, nullptr, f32_to_f16_bits};
constexpr Loops<uint16_t, float> kFromF16{nullptr, nullptr, f16_bits_to_f32};
constexpr Loops<float, uint16_t> kToBf16{nullptr, nullptr, f32_to_bf16_bits};
constexpr Loops<uint16_t, float> kFromBf16{nullptr, nullptr, bf16_bits_to_f32};
#endif
}  // namespace

void f32_to_f16(Path p, const float* src, uint16_t* dst, size_t n) { convert(p, src, dst, n, kToF16); }
void f16_to_f32(Path p, const uint16_t* src, float* dst, size_t n) { convert(p, src, dst, n, kFromF16); }
void f32_to_bf16(Path p, const float* src, uint16_t* dst, size_t n) { convert(p, src, dst, n, kToBf16); }
void bf16_to_f32(Path p, const uint16_t* src, float* dst, size_t n) { convert(p, src, dst, n, kFromBf16); }

namespace {
// The widest path this CPU has, chosen once.
Path best() {
  static const Path p = available_paths().back();
  return p;
}
}  // namespace

}  // namespace conversion

void f32_to_f16(const float* src, uint16_t* dst, size_t n) { conversion::f32_to_f16(conversion::best(), src, dst, n); }
void f16_to_f32(const uint16_t* src, float* dst, size_t n) { conversion::f16_to_f32(conversion::best(), src, dst, n); }
void f32_to_bf16(const float* src, uint16_t* dst, size_t n) { conversion::f32_to_bf16(conversion::best(), src, dst, n); }
void bf16_to_f32(const uint16_t* src, float* dst, size_t n) { conversion::bf16_to_f32(conversion::best(), src, dst, n); }

}  // namespace furnace
