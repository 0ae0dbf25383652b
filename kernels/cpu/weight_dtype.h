// Weight element types the engine reads as the checkpoint stores them, and their exact widening
// to float: bf16 is the high half of a float (a 16-bit shift), every f16 value (normal,
// subnormal, infinite) is a float exactly. NaNs come out quiet, as F16C's vcvtph2ps gives them.
//
// Two of ggml's block formats too, widened as reference/gguf_quants.h dequantizes them (one
// float32 multiply, and for Q4_1 one add, each rounded once; kernels/ builds with
// -ffp-contract=off), so a Q8_0 or Q4_1 W gives the bits its float32 dequantization gives:
//   Q8_0  32 elements in 34 bytes: f16 d, int8 q[32]                         x = q * d
//   Q4_1  32 elements in 20 bytes: f16 d, f16 m, u8 qs[16] (low nibbles: elements 0-15, high
//         nibbles: 16-31)                                                     x = (d * q) + m
// A row of a block format holds a whole number of blocks.
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

enum class WeightDType : std::uint8_t { kF32, kF16, kBF16, kQ8_0, kQ4_1 };

// Elements per block: 32 for the block formats, 1 for the others.
constexpr std::int64_t weight_block_elements(WeightDType d) {
  return d == WeightDType::kQ8_0 || d == WeightDType::kQ4_1 ? 32 : 1;
}
// Bytes of one block (of one element for F32, F16, BF16).
constexpr std::int64_t weight_block_bytes(WeightDType d) {
  switch (d) {
    case WeightDType::kF32: return 4;
    case WeightDType::kF16:
    case WeightDType::kBF16: return 2;
    case WeightDType::kQ8_0: return 34;
    case WeightDType::kQ4_1: return 20;
  }
  return 0;
}
// Bytes of n elements (a whole number of blocks).
constexpr std::int64_t weight_row_bytes(WeightDType d, std::int64_t n) {
  return n / weight_block_elements(d) * weight_block_bytes(d);
}
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

inline float widen_f16_at(const std::byte* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return widen_f16(bits);
}

// Element i of a row of `dtype` starting at byte `p` (a block's first byte for the block
// formats), widened.
inline float widen_element(const std::byte* p, WeightDType dtype, std::int64_t i) {
  if (dtype == WeightDType::kF32) {
    float f;
    std::memcpy(&f, p + i * 4, sizeof f);
    return f;
  }
  if (dtype == WeightDType::kQ8_0) {
    const std::byte* b = p + i / 32 * 34;
    return static_cast<float>(static_cast<std::int8_t>(b[2 + i % 32])) * widen_f16_at(b);
  }
  if (dtype == WeightDType::kQ4_1) {
    const std::byte* b = p + i / 32 * 20;
    const auto j = static_cast<int>(i % 32);
    const auto q = static_cast<unsigned>(b[4 + j % 16]) >> (j < 16 ? 0 : 4) & 0x0Fu;
    return widen_f16_at(b) * static_cast<float>(q) + widen_f16_at(b + 2);
  }
  if (dtype == WeightDType::kF16) return widen_f16_at(p + i * 2);
  std::uint16_t bits;
  std::memcpy(&bits, p + i * 2, sizeof bits);
  return widen_bf16(bits);
}

// out[i] = element i of the n elements of `dtype` at `p`, widened (exact); n a whole number of
// blocks (std::invalid_argument otherwise).
void widen_row(const std::byte* p, WeightDType dtype, std::int64_t n, float* out);

}  // namespace kvcheck
