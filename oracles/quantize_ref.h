// The quantizers written for clarity, not speed: one metadata group at a time, each element by
// the formulas of docs/design.md §4, fp16 and FP8 rounding done independently of
// kernels/quant_math.h (Eigen's fp16 conversion plus explicit neighbour steps; FP8 by nearest
// entry of a table of all codes). The fast paths must equal these bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/quant_format.h"

namespace kvcheck {

// Same layouts as kernels/quant_format.h.
struct QuantizedRef {
  std::vector<std::uint8_t> codes;    // [tokens][head_dim / codes_per_byte], little end first
  std::vector<std::uint16_t> scales;  // fp16 bits
  std::vector<std::uint16_t> zeros;   // fp16 bits
};

// x: [tokens][head_dim], finite, every group with fp16 metadata (min >= -65504, range within
// 65504 x levels), tokens a multiple of spec.token_group().
// Throws std::invalid_argument otherwise (the oracle does not reproduce error messages).
QuantizedRef quantize_ref(const QuantSpec& spec, std::span<const float> x, std::int64_t tokens,
                          std::int64_t head_dim);
// [tokens][head_dim]: x̂ = q * ŝ + ẑ in float.
std::vector<float> dequantize_ref(const QuantSpec& spec, const QuantizedRef& q, std::int64_t tokens,
                                  std::int64_t head_dim);

struct Fp8Ref {
  float scale = 0.0f;               // per head
  std::vector<std::uint8_t> codes;  // [n] E4M3 (e4m3fn) bytes
};
Fp8Ref quantize_fp8_e4m3_ref(std::span<const float> x);
std::vector<float> dequantize_fp8_e4m3_ref(const Fp8Ref& q);
// The value of an E4M3 code (e4m3fn; 0x7F / 0xFF are NaN).
double e4m3_value_ref(std::uint8_t code);
// Nearest E4M3 code to y, ties to the even code, saturating at ±448; y finite.
std::uint8_t e4m3_from_float_ref(float y);

// Smallest fp16 >= x and largest fp16 <= x (finite x), as fp16 bits.
std::uint16_t f16_round_up_ref(float x);
std::uint16_t f16_round_down_ref(float x);

}  // namespace kvcheck
