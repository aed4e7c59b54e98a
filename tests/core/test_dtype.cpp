// Exhaustive checks of the f16/bf16 conversions in furnace/dtype.h.
// Every 16-bit pattern is decoded and round-tripped; every tie between adjacent finite values is
// checked to go to even; about 1M random f32 patterns are compared with an independent reference:
// the x86 F16C instructions when the CPU has them, and always a rounding formula evaluated in double.
#include "furnace/dtype.h"  // defines: the functions under test

#include "core/dtype_paths.h"  // defines: conversion::Path, the bulk conversions path by path

#include <gtest/gtest.h>

#include <bit>      // defines: std::bit_cast
#include <cmath>    // defines: std::ldexp, std::frexp, std::floor, std::fmod, std::nextafter
#include <cstdint>
#include <cstdio>   // defines: std::snprintf
#include <limits>
#include <random>   // defines: std::mt19937
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // defines: _cvtsh_ss, _cvtss_sh (F16C, enabled per function below)
#define FURNACE_TEST_HAVE_X86 1
#endif

namespace furnace {
namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

// ---- hardware reference (x86 F16C) ----------------------------------------------------------

#ifdef FURNACE_TEST_HAVE_X86
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
bool have_f16c() { return __builtin_cpu_supports("f16c"); }
#else
float hw_f16_to_f32(uint16_t) { return 0.0f; }
uint16_t hw_f32_to_f16(float) { return 0; }
bool have_f16c() { return false; }
#endif

// ---- software references, written from the format definitions in double ---------------------

// f16 -> f32 from the fields: (-1)^s * mant * 2^-24 for subnormals, (1024 + mant) * 2^(exp - 25)
// for normals. NaN is built as F16C does: quiet bit set, payload shifted up.
float ref_f16_to_f32(uint16_t h) {
  const bool neg = h & 0x8000;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) {
    if (mant == 0) return neg ? -std::numeric_limits<float>::infinity()
                              : std::numeric_limits<float>::infinity();
    return from_bits((neg ? 0x80000000u : 0u) | 0x7fc00000u | (uint32_t(mant) << 13));
  }
  const double v = exp == 0 ? std::ldexp(double(mant), -24) : std::ldexp(double(1024 + mant), exp - 25);
  return static_cast<float>(neg ? -v : v);
}

// Nearest value with `sig_bits` significant bits whose exponent floors at `min_frexp_exp` (the
// subnormal spacing), ties to even. Returns the rounded magnitude of |d|.
double ref_round(double d, int sig_bits, int min_frexp_exp) {
  int e = 0;
  std::frexp(d, &e);  // d = m * 2^e, m in [0.5, 1)
  if (e < min_frexp_exp) e = min_frexp_exp;
  const double ulp = std::ldexp(1.0, e - sig_bits);
  const double q = std::floor(d / ulp);  // exact: d / ulp is a power-of-two scaling
  const double lo = q * ulp, hi = (q + 1) * ulp;
  if (d - lo < hi - d) return lo;
  if (hi - d < d - lo) return hi;
  return std::fmod(q, 2.0) == 0.0 ? lo : hi;
}

// f32 -> f16 by the definition: nearest f16 (11 significant bits, subnormal spacing 2^-24), ties
// to even, 65536 and above is inf. NaN follows F16C: quiet bit set, top 9 payload bits kept.
uint16_t ref_f32_to_f16(float f) {
  const uint16_t sign = (bits(f) & 0x80000000u) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7e00 | ((bits(f) >> 13) & 0x3ff);
  const double r = ref_round(std::fabs(double(f)), 11, -13);
  if (r >= 65536.0) return sign | 0x7c00;
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(r / std::ldexp(1.0, -24));
  int e = 0;
  std::frexp(r, &e);  // r = m * 2^e, biased f16 exponent is e - 1 + 15
  const double mant = r / std::ldexp(1.0, e - 11) - 1024.0;
  return sign | static_cast<uint16_t>(((e + 14) << 10) | static_cast<int>(mant));
}

// f32 -> bf16 by the definition: nearest value with 8 significant bits (subnormal spacing 2^-133),
// ties to even, 2^128 and above is inf. NaN: the top 16 bits with the quiet bit set.
uint16_t ref_f32_to_bf16(float f) {
  const uint16_t sign = (bits(f) & 0x80000000u) ? 0x8000 : 0;
  if (std::isnan(f)) return static_cast<uint16_t>((bits(f) >> 16) | 0x0040);
  const double r = ref_round(std::fabs(double(f)), 8, -125);
  if (r >= std::ldexp(1.0, 128)) return sign | 0x7f80;
  return sign | static_cast<uint16_t>(bits(static_cast<float>(r)) >> 16);  // r fits f32 exactly
}

// Counts mismatches and reports only the first few, so a broken conversion does not print 65,536 lines.
struct Mismatches {
  int count = 0;
  void add(const std::string& what) {
    if (count++ < 8) ADD_FAILURE() << what;
  }
};

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

// Random f32 patterns: half uniform over all 2^32 (so NaN and inf show up), half with exponents
// around the f16 range (underflow to zero, subnormals, normals, overflow). Fixed seed.
std::vector<float> random_floats(size_t n) {
  std::mt19937 rng(20240611u);
  std::vector<float> v;
  v.reserve(n + 64);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = rng();
    if (i % 2 == 1) u = (u & 0x807fffffu) | ((95u + u % 57u) << 23);  // biased exp 95..151
    v.push_back(from_bits(u));
  }
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                               0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u, 0x7fbfffffu,
                               0x7fffffffu, 0x00000001u, 0x007fffffu, 0x00800000u, 0x7f7fffffu,
                               0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, 0x47800000u,
                               0x33000000u, 0x33000001u, 0x32ffffffu, 0x33800000u, 0x387fc000u,
                               0x387fe000u, 0x387fffffu, 0x38800000u, 0x3f800000u, 0x3f801000u};
  for (uint32_t s : specials) {
    v.push_back(from_bits(s));
    v.push_back(from_bits(s ^ 0x80000000u));
  }
  return v;
}

// ---- metadata --------------------------------------------------------------------------------

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_name(DType::f32), "float32");
  EXPECT_EQ(dtype_name(DType::f16), "float16");
  EXPECT_EQ(dtype_name(DType::bf16), "bfloat16");
  EXPECT_EQ(dtype_name(DType::i32), "int32");
  EXPECT_EQ(dtype_name(DType::u8), "uint8");
}

// ---- f16 -------------------------------------------------------------------------------------

TEST(F16, DecodesEveryPatternLikeTheFieldFormula) {
  Mismatches bad;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t got = bits(f16_bits_to_f32(uint16_t(h)));
    const uint32_t want = bits(ref_f16_to_f32(uint16_t(h)));
    if (got != want) bad.add("f16 " + hex(h) + " -> " + hex(got) + ", formula says " + hex(want));
  }
  EXPECT_EQ(bad.count, 0);
}

TEST(F16, DecodesEveryPatternLikeF16C) {
  if (!have_f16c()) GTEST_SKIP() << "CPU has no F16C; the field-formula test still ran";
  Mismatches bad;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t got = bits(f16_bits_to_f32(uint16_t(h)));
    const uint32_t want = bits(hw_f16_to_f32(uint16_t(h)));
    if (got != want) bad.add("f16 " + hex(h) + " -> " + hex(got) + ", F16C says " + hex(want));
  }
  EXPECT_EQ(bad.count, 0);
}

TEST(F16, RoundTripIsIdentityForEveryNonNaNPattern) {
  Mismatches bad;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t back = f32_to_f16_bits(f16_bits_to_f32(uint16_t(h)));
    if (f16_is_nan(uint16_t(h))) {
      // NaN stays NaN, sign kept, quiet bit set, payload kept.
      if (back != (h | 0x0200)) bad.add("NaN " + hex(h) + " came back as " + hex(back));
    } else if (back != h) {
      bad.add(hex(h) + " came back as " + hex(back));
    }
  }
  EXPECT_EQ(bad.count, 0);
}

// For each pair of adjacent finite f16 values a < b (and the pair 65504 < 65536, where 65536 stands
// for inf), the exact midpoint rounds to the one with an even pattern, and one f32 ulp either side
// rounds to the nearer one. Both signs.
TEST(F16, MidpointsTieToEvenAndNeighboursGoToTheNearer) {
  const bool hw = have_f16c();
  Mismatches bad;
  auto check = [&](float x, uint16_t want, const char* what) {
    const uint16_t got = f32_to_f16_bits(x);
    if (got != want) bad.add(std::string(what) + " " + hex(bits(x)) + " -> " + hex(got) + ", want " + hex(want));
    if (hw && hw_f32_to_f16(x) != want) bad.add(std::string("F16C disagrees on ") + what + " " + hex(bits(x)));
  };
  for (uint32_t i = 0; i < 0x7c00; ++i) {
    const double a = ref_f16_to_f32(uint16_t(i));
    const double b = i + 1 == 0x7c00 ? 65536.0 : double(ref_f16_to_f32(uint16_t(i + 1)));
    const double mid = (a + b) / 2;
    const float midf = static_cast<float>(mid);
    ASSERT_EQ(double(midf), mid) << "midpoint of " << hex(i) << " not exact in f32";
    const uint16_t even = (i % 2 == 0) ? uint16_t(i) : uint16_t(i + 1);
    const float up = std::nextafter(midf, std::numeric_limits<float>::infinity());
    const float down = std::nextafter(midf, 0.0f);
    for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
      const float s = sign ? -1.0f : 1.0f;
      check(s * midf, even | sign, "midpoint");
      check(s * up, uint16_t(i + 1) | sign, "above midpoint");
      check(s * down, uint16_t(i) | sign, "below midpoint");
    }
  }
  EXPECT_EQ(bad.count, 0);
}

TEST(F16, OverflowUnderflowAndNaN) {
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);  // the tie goes to the even neighbour: inf
  EXPECT_EQ(f32_to_f16_bits(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_f16_bits(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);     // half of it: tie to even, zero
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(-std::ldexp(1.0f, -26)), 0x8000);    // negative underflow keeps the sign
  EXPECT_EQ(f32_to_f16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_f16_bits(from_bits(0x7f800001u)), 0x7e00);    // signalling NaN, low payload: quiet
  EXPECT_EQ(f32_to_f16_bits(from_bits(0xffc00000u)), 0xfe00);    // sign kept
  EXPECT_EQ(f32_to_f16_bits(from_bits(0x7fa02000u)), 0x7f01);    // top payload bits kept
  EXPECT_EQ(bits(f16_bits_to_f32(0x7c01)), 0x7fc02000u);         // decoded NaN is quiet
}

TEST(F16, RandomPatternsMatchTheReferences) {
  const std::vector<float> xs = random_floats(1u << 20);
  const bool hw = have_f16c();
  Mismatches bad;
  for (float x : xs) {
    const uint16_t got = f32_to_f16_bits(x);
    const uint16_t want = ref_f32_to_f16(x);
    if (got != want) bad.add(hex(bits(x)) + " -> " + hex(got) + ", formula says " + hex(want));
    if (hw) {
      const uint16_t hw_want = hw_f32_to_f16(x);
      if (got != hw_want) bad.add(hex(bits(x)) + " -> " + hex(got) + ", F16C says " + hex(hw_want));
    }
  }
  EXPECT_EQ(bad.count, 0);
}

// ---- bf16 ------------------------------------------------------------------------------------

TEST(BF16, DecodesEveryPatternAsTheTopHalf) {
  Mismatches bad;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t got = bits(bf16_bits_to_f32(uint16_t(h)));
    if (got != h << 16) bad.add("bf16 " + hex(h) + " -> " + hex(got));
  }
  EXPECT_EQ(bad.count, 0);
}

TEST(BF16, RoundTripIsIdentityForEveryNonNaNPattern) {
  Mismatches bad;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t back = f32_to_bf16_bits(bf16_bits_to_f32(uint16_t(h)));
    const uint32_t want = bf16_is_nan(uint16_t(h)) ? (h | 0x0040) : h;
    if (back != want) bad.add(hex(h) + " came back as " + hex(back));
  }
  EXPECT_EQ(bad.count, 0);
}

TEST(BF16, MidpointsTieToEvenAndNeighboursGoToTheNearer) {
  Mismatches bad;
  auto check = [&](float x, uint16_t want, const char* what) {
    const uint16_t got = f32_to_bf16_bits(x);
    if (got != want) bad.add(std::string(what) + " " + hex(bits(x)) + " -> " + hex(got) + ", want " + hex(want));
  };
  for (uint32_t i = 0; i < 0x7f80; ++i) {
    const double a = bf16_bits_to_f32(uint16_t(i));
    const double b = i + 1 == 0x7f80 ? std::ldexp(1.0, 128) : double(bf16_bits_to_f32(uint16_t(i + 1)));
    const double mid = (a + b) / 2;
    const float midf = static_cast<float>(mid);
    ASSERT_EQ(double(midf), mid) << "midpoint of " << hex(i) << " not exact in f32";
    const uint16_t even = (i % 2 == 0) ? uint16_t(i) : uint16_t(i + 1);
    const float up = std::nextafter(midf, std::numeric_limits<float>::infinity());
    const float down = std::nextafter(midf, 0.0f);
    for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
      const float s = sign ? -1.0f : 1.0f;
      check(s * midf, even | sign, "midpoint");
      check(s * up, uint16_t(i + 1) | sign, "above midpoint");
      check(s * down, uint16_t(i) | sign, "below midpoint");
    }
  }
  EXPECT_EQ(bad.count, 0);
}

TEST(BF16, OverflowAndNaN) {
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x7f7f0000u)), 0x7f7f);  // bf16 max
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x7f7f7fffu)), 0x7f7f);  // just below the midpoint
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x7f7f8000u)), 0x7f80);  // midpoint to "2^128": inf
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x7f800001u)), 0x7fc0);  // payload only in the low half: still NaN
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0xff80ffffu)), 0xffc0);  // and would round to inf if not checked
  EXPECT_EQ(f32_to_bf16_bits(from_bits(0x7fc12345u)), 0x7fc1);
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(BF16, RandomPatternsMatchTheDoubleFormula) {
  const std::vector<float> xs = random_floats(1u << 20);
  Mismatches bad;
  for (float x : xs) {
    const uint16_t got = f32_to_bf16_bits(x);
    const uint16_t want = ref_f32_to_bf16(x);
    if (got != want) bad.add(hex(bits(x)) + " -> " + hex(got) + ", formula says " + hex(want));
  }
  EXPECT_EQ(bad.count, 0);
}

// ---- bulk ------------------------------------------------------------------------------------

TEST(DType, BulkConversionsMatchTheScalarOnes) {
  const std::vector<float> xs = random_floats(4096);
  const size_t n = xs.size();
  std::vector<uint16_t> h(n), b(n);
  std::vector<float> hf(n), bf(n);
  f32_to_f16(xs.data(), h.data(), n);
  f32_to_bf16(xs.data(), b.data(), n);
  f16_to_f32(h.data(), hf.data(), n);
  bf16_to_f32(b.data(), bf.data(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i], f32_to_f16_bits(xs[i])) << i;
    ASSERT_EQ(b[i], f32_to_bf16_bits(xs[i])) << i;
    ASSERT_EQ(bits(hf[i]), bits(round_to_f16(xs[i]))) << i;
    ASSERT_EQ(bits(bf[i]), bits(round_to_bf16(xs[i]))) << i;
  }
  // Every 16-bit pattern through the bulk paths (which may use F16C) equals the scalar path.
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> as_f16(65536), as_bf16(65536);
  f16_to_f32(all.data(), as_f16.data(), all.size());
  bf16_to_f32(all.data(), as_bf16.data(), all.size());
  std::vector<uint16_t> back_f16(65536), back_bf16(65536);
  f32_to_f16(as_f16.data(), back_f16.data(), all.size());
  f32_to_bf16(as_bf16.data(), back_bf16.data(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(bits(as_f16[i]), bits(f16_bits_to_f32(all[i]))) << i;
    ASSERT_EQ(bits(as_bf16[i]), bits(bf16_bits_to_f32(all[i]))) << i;
    ASSERT_EQ(back_f16[i], f32_to_f16_bits(as_f16[i])) << i;
    ASSERT_EQ(back_bf16[i], f32_to_bf16_bits(as_bf16[i])) << i;
  }
}

// The vectorised f32 -> bf16 path against the scalar one where rounding decides: every top half
// (signs, exponents, NaNs, infinities) with the low halves just below, at and above the tie, at
// odd and even results, and at lengths that leave a scalar tail.
TEST(DType, BulkBf16RoundingMatchesTheScalarAtEveryTopHalf) {
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
  std::vector<float> xs;
  for (uint32_t top = 0; top < 0x10000u; ++top)
    for (uint32_t low : lows) xs.push_back(from_bits((top << 16) | low));
  for (size_t n : {xs.size(), xs.size() - 7, size_t{15}, size_t{1}}) {
    std::vector<uint16_t> got(n);
    f32_to_bf16(xs.data(), got.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], f32_to_bf16_bits(xs[i])) << hex(bits(xs[i])) << " n " << n;
  }
}

// Each vector path this CPU has (F16C/AVX2, AVX-512) against the scalar path, both ways: every
// 16-bit pattern, and f32 edge values (zeros, f32 and f16/bf16 subnormals, the largest finite
// values and what rounds to inf, inf, quiet and signalling NaNs with payloads, and for every f16
// and bf16 exponent the low bits just below, at and above the tie at odd and even results), at
// lengths that leave every tail from 0 to 15.
TEST(DType, EveryVectorPathMatchesTheScalarPath) {
  using conversion::Path;
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> edges;
  for (uint32_t e : {0x00000000u, 0x00000001u, 0x00000002u, 0x007fffffu, 0x00400000u, 0x00800000u,
                     0x33800000u, 0x33800001u, 0x337fffffu, 0x387fe000u, 0x387ff000u, 0x38800000u,
                     0x477fe000u, 0x477fefffu, 0x477ff000u, 0x47800000u, 0x7f7fffffu, 0x7f7f8000u,
                     0x7f7f7fffu, 0x7f800000u, 0x7f800001u, 0x7fbfffffu, 0x7fc00000u, 0x7fffffffu,
                     0x7fa02000u, 0x7f80ffffu, 0x00008000u, 0x00018000u, 0x00007fffu, 0x00010000u})
    for (uint32_t sign : {0u, 0x80000000u}) edges.push_back(from_bits(e | sign));
  // Ties and their neighbours: bf16 keeps 16 bits, f16 (normal) keeps 13 low bits out.
  for (uint32_t exp = 0; exp < 256; ++exp)
    for (uint32_t mant : {0x000000u, 0x000001u, 0x007fffu, 0x008000u, 0x008001u, 0x018000u, 0x00ffffu,
                          0x000fffu, 0x001000u, 0x001001u, 0x003000u, 0x7fffffu, 0x7f8000u})
      edges.push_back(from_bits((exp << 23) | mant));
  const std::vector<Path> paths = conversion::available_paths();
  ASSERT_EQ(paths.front(), Path::scalar);
  for (Path p : paths) {
    SCOPED_TRACE(conversion::path_name(p));
    for (size_t n : {all.size(), all.size() - 1, size_t{31}, size_t{17}, size_t{16}, size_t{15}, size_t{1}, size_t{0}}) {
      std::vector<float> want_f(n + 1, -1.0f), got_f(n + 1, -1.0f);  // one past n: must stay untouched
      conversion::f16_to_f32(Path::scalar, all.data(), want_f.data(), n);
      conversion::f16_to_f32(p, all.data(), got_f.data(), n);
      for (size_t i = 0; i <= n; ++i) ASSERT_EQ(bits(got_f[i]), bits(want_f[i])) << "f16 " << hex(all[i % 65536]) << " n " << n;
      conversion::bf16_to_f32(Path::scalar, all.data(), want_f.data(), n);
      conversion::bf16_to_f32(p, all.data(), got_f.data(), n);
      for (size_t i = 0; i <= n; ++i) ASSERT_EQ(bits(got_f[i]), bits(want_f[i])) << "bf16 " << hex(all[i % 65536]) << " n " << n;
    }
    // Every 16-bit value's f32 (and so every f16/bf16 NaN and subnormal) back to 16 bits, and the edges.
    std::vector<float> xs = edges;
    for (uint16_t h : all) {
      xs.push_back(f16_bits_to_f32(h));
      xs.push_back(bf16_bits_to_f32(h));
    }
    for (size_t tail = 0; tail < 16; ++tail) {
      const size_t n = xs.size() - tail;
      std::vector<uint16_t> want(n + 1, 0xabcd), got(n + 1, 0xabcd);
      conversion::f32_to_f16(Path::scalar, xs.data(), want.data(), n);
      conversion::f32_to_f16(p, xs.data(), got.data(), n);
      for (size_t i = 0; i <= n; ++i) ASSERT_EQ(got[i], want[i]) << "to f16 " << hex(bits(xs[i < n ? i : 0])) << " n " << n;
      conversion::f32_to_bf16(Path::scalar, xs.data(), want.data(), n);
      conversion::f32_to_bf16(p, xs.data(), got.data(), n);
      for (size_t i = 0; i <= n; ++i) ASSERT_EQ(got[i], want[i]) << "to bf16 " << hex(bits(xs[i < n ? i : 0])) << " n " << n;
    }
  }
}

}  // namespace
}  // namespace furnace
