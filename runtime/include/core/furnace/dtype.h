// furnace/dtype.h: element types and exact IEEE conversions between f32 and the 16-bit floats.
// Conversions round to nearest, ties to even; overflow goes to +-inf; subnormals are kept; NaN stays
// NaN (quiet, sign kept). They are bit-exact with hardware (x86 F16C, CUDA __float2half_rn,
// __float2bfloat16_rn), which is what lets the simulator reproduce fp16 overflow and skipped steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace furnace {

enum class DType : uint8_t { f32, f16, bf16, i32, u8 };

size_t dtype_size(DType t);
inline bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }
std::string_view dtype_name(DType t);  // "float32", "float16", "bfloat16", "int32", "uint8"

// IEEE 754 binary16.
uint16_t f32_to_f16_bits(float f);
float f16_bits_to_f32(uint16_t h);

// bfloat16: the top 16 bits of an f32, rounded to nearest even.
uint16_t f32_to_bf16_bits(float f);
float bf16_bits_to_f32(uint16_t h);

// Round-trips through the 16-bit type: the value an f32 becomes when stored as f16/bf16.
inline float round_to_f16(float f) { return f16_bits_to_f32(f32_to_f16_bits(f)); }
inline float round_to_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

// Bulk conversions (n elements).
void f32_to_f16(const float* src, uint16_t* dst, size_t n);
void f16_to_f32(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16(const float* src, uint16_t* dst, size_t n);
void bf16_to_f32(const uint16_t* src, float* dst, size_t n);

}  // namespace furnace
