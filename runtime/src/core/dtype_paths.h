// core/dtype_paths: the bulk f32 <-> f16/bf16 conversions by path, for the tests that hold each
// vector path against the scalar one on the machine they run on. The public f32_to_bf16 & co.
// (furnace/dtype.h) take the widest path the CPU has; this header names each path.
// Not here: the conversions' rules (dtype.cpp's scalar functions are the truth).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace furnace::conversion {

enum class Path {
  scalar,  // integer bit manipulation, one value at a time
  avx2,    // f16: F16C (8 lanes); bf16: AVX2 integer instructions (8 lanes)
  avx512,  // f16: AVX-512F's VCVTPS2PH/VCVTPH2PS; bf16: AVX-512F/BW integer instructions (16 lanes,
           // masked tails)
};

// The paths this CPU can run, scalar first; the last is what the public functions use.
std::vector<Path> available_paths();
const char* path_name(Path p);

void f32_to_f16(Path p, const float* src, uint16_t* dst, size_t n);
void f16_to_f32(Path p, const uint16_t* src, float* dst, size_t n);
void f32_to_bf16(Path p, const float* src, uint16_t* dst, size_t n);
void bf16_to_f32(Path p, const uint16_t* src, float* dst, size_t n);

}  // namespace furnace::conversion
