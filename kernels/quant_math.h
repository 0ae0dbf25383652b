// Scalar arithmetic of the KV quantizers, shared word for word by the CPU twin and the CUDA
// kernels so that both produce the same codes and metadata bit for bit.
//
// Everything here is plain IEEE-754 binary32 arithmetic with one rounding per operation. On the
// device the operations go through the explicit _rn intrinsics: nvcc would otherwise contract a
// multiply followed by an add into one FMA, which rounds once instead of twice and would make
// the GPU disagree with the CPU in the last bit. The host build uses ISO C++ (no -ffp-contract
// from GNU mode) and SSE2, so `a * b + c` there is already two roundings.
//
// C++17 and no library calls on purpose: nvcc compiles this header too.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVCHECK_HD __host__ __device__ __forceinline__
#else
#define KVCHECK_HD inline
#endif

namespace kvcheck::quant {

// Largest finite fp16 value. The zero point is the group minimum rounded down to fp16 and the
// scale an fp16 too, so a group whose minimum is below -kF16Max, or whose covering scale exceeds
// kF16Max, has no fp16 metadata and is rejected (see kernels/cpu/quantize.h).
inline constexpr float kF16Max = 65504.0f;
inline constexpr std::uint16_t kF16Inf = 0x7C00u;
// Largest finite FP8 E4M3 value (the OCP "e4m3fn" variant: no infinities, S.1111.111 is NaN).
inline constexpr float kE4M3Max = 448.0f;
// Smallest normal float: the floor of an FP8 per-head scale (a scale must be a normal float so
// that x / scale is computed with a relative rounding error).
inline constexpr float kFloatMinNormal = 1.17549435e-38f;

KVCHECK_HD std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

KVCHECK_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// One rounding each, never fused.
KVCHECK_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KVCHECK_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KVCHECK_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
KVCHECK_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

KVCHECK_HD bool is_finite(float x) { return (float_bits(x) & 0x7F800000u) != 0x7F800000u; }
KVCHECK_HD float min_f(float a, float b) { return b < a ? b : a; }
KVCHECK_HD float max_f(float a, float b) { return b > a ? b : a; }
KVCHECK_HD float abs_f(float x) { return bits_float(float_bits(x) & 0x7FFFFFFFu); }

// ---------------------------------------------------------------------------------------------
// fp16. Conversions by bit manipulation, so that host and device agree without relying on either
// side's library. f16_to_float is exact; f16_from_float rounds to nearest even like Eigen::half
// and torch (a test holds it against reference/tensor.h on every fp16 value and many floats).

KVCHECK_HD float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t em = h & 0x7FFFu;
  if (em >= 0x7C00u) return bits_float(sign | 0x7F800000u | ((em & 0x03FFu) << 13));  // inf, NaN
  // Shifting exponent and mantissa into float position and multiplying by 2^112 re-biases the
  // exponent (15 -> 127); for subnormal fp16 the float is subnormal too and the product exact.
  return bits_float(sign | float_bits(mul_rn(bits_float(em << 13), 0x1.0p112f)));
}

KVCHECK_HD std::uint16_t f16_from_float(float x) {
  const std::uint32_t u = float_bits(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);  // NaN: quiet
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (a < 0x38800000u) {
    // Below the smallest normal fp16 (2^-14): the result is subnormal, a multiple of 2^-24.
    // Adding 0.5 (2^-1) aligns the float so that its mantissa's low bits hold x / 2^-24
    // rounded to nearest even by the hardware addition itself.
    const float shifted = add_rn(abs_f(x), 0.5f);
    return static_cast<std::uint16_t>(sign | (float_bits(shifted) - 0x3F000000u));
  }
  // Normal: re-bias the exponent and round the 13 dropped mantissa bits to nearest even.
  const std::uint32_t odd = (a >> 13) & 1u;
  const std::uint32_t r = a + 0xC8000FFFu + odd;  // -(127-15) << 23, plus the rounding bias
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

// The fp16 value next above / below a finite fp16 value (toward +inf / -inf).
KVCHECK_HD std::uint16_t f16_next_up(std::uint16_t h) {
  if (h == 0x8000u) return 0x0001u;                                 // -0 -> smallest subnormal
  if (h & 0x8000u) return static_cast<std::uint16_t>(h - 1u);        // negative: toward zero
  return static_cast<std::uint16_t>(h + 1u);                         // positive (0x7BFF -> inf)
}
KVCHECK_HD std::uint16_t f16_next_down(std::uint16_t h) {
  if (h == 0x0000u) return 0x8001u;
  if (h & 0x8000u) return static_cast<std::uint16_t>(h + 1u);
  return static_cast<std::uint16_t>(h - 1u);
}

// Directed roundings: the smallest fp16 >= x, and the largest fp16 <= x (x finite).
KVCHECK_HD std::uint16_t f16_round_up(float x) {
  const std::uint16_t h = f16_from_float(x);
  return f16_to_float(h) < x ? f16_next_up(h) : h;
}
KVCHECK_HD std::uint16_t f16_round_down(float x) {
  const std::uint16_t h = f16_from_float(x);
  return f16_to_float(h) > x ? f16_next_down(h) : h;
}

// ---------------------------------------------------------------------------------------------
// Asymmetric integer quantization of one group (b bits, levels L = 2^b - 1).
//
//   zero  ẑ = the largest fp16 <= min                        (rounded down)
//   scale ŝ = the smallest fp16 with top(ŝ) >= max,          (rounded up, "covering")
//             top(s) = fl(L * s + ẑ), the value code L dequantizes to;
//             ŝ = 0 when max == ẑ (a constant group whose value is an fp16 number)
//   code  q = clamp(rint((x - ẑ) * fl(1 / ŝ)), 0, L),  q = 0 when ŝ = 0
//   value x̂ = fl(q * ŝ + ẑ)
//
// q * ŝ is exact in float (8 by 11 significant bits, at least 2^-24), so x̂ is the exactly
// rounded q·ŝ + ẑ: one rounding, the same as an FMA, with no FMA needed.
//
// Because ẑ <= min and top(ŝ) >= max, every x lies inside the dequantized range and the clamp
// can only move a code by the float rounding of (x - ẑ) / ŝ: |x - x̂| <= ŝ/2 plus a few ulp
// (oracles/quant_bounds.h names the slack).

struct QuantParams {
  std::uint16_t scale;  // fp16 bits
  std::uint16_t zero;   // fp16 bits
};

KVCHECK_HD float dequantize_value(std::uint32_t code, float scale, float zero) {
  return add_rn(mul_rn(static_cast<float>(code), scale), zero);
}

// min and max of the group: finite, min >= -kF16Max (callers check). The returned scale is
// kF16Inf when the range is too wide for an fp16 scale: callers reject the group.
KVCHECK_HD QuantParams choose_params(float mn, float mx, int bits) {
  const float levels = static_cast<float>((1u << bits) - 1u);
  const std::uint16_t zero = f16_round_down(mn);
  const float z = f16_to_float(zero);
  if (!(mx > z)) return QuantParams{0, zero};  // constant group, exact
  // Candidate from the float quotient, then walked on the fp16 grid to the smallest scale that
  // covers: the quotient's own rounding can leave it one fp16 step off either way.
  std::uint16_t scale = f16_round_up(div_rn(sub_rn(mx, z), levels));
  while (scale > 0x0001u && add_rn(mul_rn(levels, f16_to_float(static_cast<std::uint16_t>(scale - 1u))), z) >= mx) {
    --scale;
  }
  while (add_rn(mul_rn(levels, f16_to_float(scale)), z) < mx) ++scale;
  return QuantParams{scale, zero};
}

// Round to nearest even of a float in [0, 2^22], as float arithmetic: adding 1.5 * 2^23 leaves
// the integer in the low mantissa bits (the addition itself rounds to nearest even).
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23

// The code of x given the group's scale and zero (as floats) and 1/scale (0 when scale is 0).
KVCHECK_HD std::uint32_t quantize_value(float x, float zero, float inv_scale, float levels) {
  const float t = mul_rn(sub_rn(x, zero), inv_scale);
  const float clamped = min_f(max_f(t, 0.0f), levels);
  return float_bits(add_rn(clamped, kRoundMagic)) - float_bits(kRoundMagic);
}

KVCHECK_HD float inverse_scale(float scale) { return scale > 0.0f ? div_rn(1.0f, scale) : 0.0f; }

// ---------------------------------------------------------------------------------------------
// FP8 E4M3 (e4m3fn): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; normals 2^-6 .. 448,
// subnormals multiples of 2^-9; no infinities.

KVCHECK_HD float e4m3_to_float(std::uint8_t c) {
  const std::uint32_t sign = static_cast<std::uint32_t>(c & 0x80u) << 24;
  const std::uint32_t em = c & 0x7Fu;
  if (em == 0x7Fu) return bits_float(sign | 0x7FC00000u);  // NaN (never produced by encoding)
  // Same trick as fp16: shift into float position and re-bias by 2^(127-7).
  return bits_float(sign | float_bits(mul_rn(bits_float(em << 20), 0x1.0p120f)));
}

// Round to nearest even, saturating to ±448 (what CUDA's __NV_SATFINITE conversion does for
// finite inputs). x must be finite.
KVCHECK_HD std::uint8_t e4m3_from_float(float x) {
  const std::uint32_t u = float_bits(x);
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  const float a = abs_f(x);
  if (a >= kE4M3Max) return static_cast<std::uint8_t>(sign | 0x7Eu);
  if (a < 0x1.0p-6f) {
    // Subnormal range: multiples of 2^-9. Adding 2^-1 rounds a to that grid (2^-1 has ulp 2^-24,
    // so scale by 2^-15 first: a * 2^-15 + 2^-1 has ulp 2^-24 = 2^-9 * 2^-15). Exact scaling.
    const float shifted = add_rn(mul_rn(a, 0x1.0p-15f), 0.5f);
    return static_cast<std::uint8_t>(sign | (float_bits(shifted) - 0x3F000000u));
  }
  const std::uint32_t b = float_bits(a);
  const std::uint32_t odd = (b >> 20) & 1u;
  const std::uint32_t r = b - (120u << 23) + 0x7FFFFu + odd;  // re-bias, round 20 dropped bits
  const std::uint32_t code = r >> 20;
  return static_cast<std::uint8_t>(sign | (code > 0x7Eu ? 0x7Eu : code));
}

// Per-head scale: amax / 448, at least the smallest normal float (also for an all-zero head).
KVCHECK_HD float fp8_scale_for_amax(float amax) { return max_f(div_rn(amax, kE4M3Max), kFloatMinNormal); }

}  // namespace kvcheck::quant
