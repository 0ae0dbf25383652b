// Error bounds of the KV quantizers: what every quantized element must satisfy, given only the
// stored metadata. A property that finds an element outside them has found a bug (docs/design.md
// §4).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kernels/quant_format.h"

namespace kvcheck {

// Integer formats: |x - x̂| <= ŝ/2 + slack, with ŝ the stored fp16 scale.
//
// The slack covers float arithmetic only (the covering scale makes the clamp exact in real
// numbers): (x - ẑ) * (1/ŝ) is three roundings, which can move the computed code across a
// half-integer by 3 * 2^-24 * |x - ẑ| / ŝ codes, and x̂ = q*ŝ + ẑ is rounded once more. In units
// of 2^-24 * max(|x|, |ẑ|, |x̂|): 3 * 2 for the code, 1 for x̂, 1 to spare.
inline constexpr double kIntBoundSlackUlps = 8.0;
// For subnormal floats the relative arguments above fail; a few of the smallest steps cover them.
inline constexpr double kSubnormalSlack = 0x1.0p-147;  // 4 * 2^-149

double int_quant_error_bound(float x, float x_hat, float scale, float zero);

// FP8 E4M3 with per-head scale s: |x - x̂| <= 2^-4 |x| (half an ulp of a 3-bit mantissa, for
// |x| / s in the normal range) + 2^-10 s (half the subnormal step 2^-9, in units of s) + slack:
// x / s and e4m3 * s are one rounding each, 2 ulp of |x| and |x̂| covers both with margin.
inline constexpr double kE4M3RelativeBound = 0x1.0p-4;
inline constexpr double kE4M3SubnormalHalfStep = 0x1.0p-10;
inline constexpr double kFp8BoundSlackUlps = 4.0;

double fp8_error_bound(float x, float x_hat, float scale);

// Whole blocks ([tokens][head_dim], metadata as in kernels/quant_format.h). Empty string when
// every element is within its bound, else the first violation: token, channel, x, x̂, bound.
std::string check_int_quant_bound(const QuantSpec& spec, std::span<const float> x, std::span<const float> x_hat,
                                  std::span<const std::uint16_t> scales, std::span<const std::uint16_t> zeros,
                                  std::int64_t tokens, std::int64_t head_dim);
std::string check_fp8_bound(std::span<const float> x, std::span<const float> x_hat, float scale,
                            std::int64_t head_dim);

// Fused dequantize-dot against the exact dot of the same dequantized values: the fused kernels
// sum head_dim products in float after folding scale and zero into the query, so
// |fused - exact| <= 2 (head_dim + 4) 2^-24 * Σ_c |q_c| (|ŝ_c code_c| + |ẑ_c|) (+ subnormal slack).
// magnitude is that sum; the caller computes it from the metadata.
double fused_dot_tolerance(std::int64_t head_dim, double magnitude);

}  // namespace kvcheck
