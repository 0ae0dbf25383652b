// Weight element types the engine reads as the checkpoint stores them, and their exact widening
// to float: bf16 is the high half of a float (a 16-bit shift), every f16 value (normal,
// subnormal, infinite) is a float exactly. NaNs come out quiet, as F16C's vcvtph2ps gives them.
//
// Elements are little-endian and read through std::memcpy, so a pointer may sit at any byte
// (safetensors packs tensors back to back: an f32 tensor after an odd-length bf16 one is only
// 2-byte aligned).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvcheck {

static_assert(std::endian::native == std::endian::little, "weights are read as little-endian elements");

enum class WeightDType : std::uint8_t { kF32, kF16, kBF16 };

constexpr std::int64_t weight_dtype_size(WeightDType d) { return d == WeightDType::kF32 ? 4 : 2; }
const char* weight_dtype_name(WeightDType d);

inline float widen_bf16(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float widen_f16(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
  const std::uint32_t mantissa = bits & 0x3FFu;
  std::uint32_t u;
  if (exponent == 0x1F) {
    u = sign | 0x7F800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);  // inf, or a quiet NaN
  } else if (exponent != 0) {
    u = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  } else {
    // Zero or subnormal: mantissa * 2^-24, exact in float (at most 10 significant bits).
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    std::memcpy(&u, &magnitude, sizeof u);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Element i of a row of `dtype` elements starting at byte `p`, widened.
inline float widen_element(const std::byte* p, WeightDType dtype, std::int64_t i) {
  if (dtype == WeightDType::kF32) {
    float f;
    std::memcpy(&f, p + i * 4, sizeof f);
    return f;
  }
  std::uint16_t bits;
  std::memcpy(&bits, p + i * 2, sizeof bits);
  return dtype == WeightDType::kBF16 ? widen_bf16(bits) : widen_f16(bits);
}

// out[i] = element i of the n elements of `dtype` at `p`, widened (exact).
void widen_row(const std::byte* p, WeightDType dtype, std::int64_t n, float* out);

}  // namespace kvcheck
