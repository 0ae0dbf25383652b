// Dequantization of ggml block formats (layouts in gguf_quants.h). Each product and sum is one
// float32 operation, in gguf-py's order; this file is built with -ffp-contract=off so that no
// compiler fuses a multiply and an add into one rounding.
#include "reference/gguf_quants.h"

#include <bit>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "reference/gguf.h"
#include "reference/tensor.h"

namespace kvcheck {

namespace {

using Byte = std::uint8_t;

float f16(const Byte* p) { return f16_bits_to_float(static_cast<std::uint16_t>(p[0] | (p[1] << 8))); }

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block's 12 packed bytes.
void scale_min_k4(const Byte* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void q8_0(const Byte* b, float* y) {
  const float d = f16(b);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(static_cast<std::int8_t>(b[2 + i])) * d;
}

void q4_0(const Byte* b, float* y) {
  const float d = f16(b);
  const Byte* qs = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((qs[i] & 0x0F) - 8);
    y[i + 16] = d * static_cast<float>((qs[i] >> 4) - 8);
  }
}

void q4_1(const Byte* b, float* y) {
  const float d = f16(b);
  const float m = f16(b + 2);
  const Byte* qs = b + 4;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>(qs[i] & 0x0F) + m;
    y[i + 16] = d * static_cast<float>(qs[i] >> 4) + m;
  }
}

std::uint32_t u32(const Byte* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

void q5_0(const Byte* b, float* y) {
  const float d = f16(b);
  const std::uint32_t qh = u32(b + 2);
  const Byte* qs = b + 6;
  for (int i = 0; i < 16; ++i) {
    const int lo = (qs[i] & 0x0F) | static_cast<int>(((qh >> i) & 1u) << 4);
    const int hi = (qs[i] >> 4) | static_cast<int>(((qh >> (i + 16)) & 1u) << 4);
    y[i] = d * static_cast<float>(lo - 16);
    y[i + 16] = d * static_cast<float>(hi - 16);
  }
}

void q5_1(const Byte* b, float* y) {
  const float d = f16(b);
  const float m = f16(b + 2);
  const std::uint32_t qh = u32(b + 4);
  const Byte* qs = b + 8;
  for (int i = 0; i < 16; ++i) {
    const int lo = (qs[i] & 0x0F) | static_cast<int>(((qh >> i) & 1u) << 4);
    const int hi = (qs[i] >> 4) | static_cast<int>(((qh >> (i + 16)) & 1u) << 4);
    y[i] = d * static_cast<float>(lo) + m;
    y[i + 16] = d * static_cast<float>(hi) + m;
  }
}

// Q4_K and Q5_K share everything but the fifth bit (qh == nullptr for Q4_K).
void k4_k5(const Byte* b, const Byte* qh, const Byte* qs, float* y) {
  const float d = f16(b);
  const float dmin = f16(b + 2);
  const Byte* scales = b + 4;
  for (int j = 0; j < 8; ++j) {
    int sc = 0;
    int mn = 0;
    scale_min_k4(scales, j, sc, mn);
    const float dj = d * static_cast<float>(sc);
    const float mj = dmin * static_cast<float>(mn);
    const Byte* chunk = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int i = 0; i < 32; ++i) {
      int q = (chunk[i] >> shift) & 0x0F;
      if (qh != nullptr) q |= ((qh[i] >> j) & 1) << 4;
      const float scaled = dj * static_cast<float>(q);
      y[32 * j + i] = scaled - mj;
    }
  }
}

void q4_k(const Byte* b, float* y) { k4_k5(b, nullptr, b + 16, y); }
void q5_k(const Byte* b, float* y) { k4_k5(b, b + 16, b + 48, y); }

void q6_k(const Byte* b, float* y) {
  const Byte* ql = b;
  const Byte* qh = b + 128;
  const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = f16(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128;
    const int r = e % 128;
    const int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
    const float ds = d * static_cast<float>(scales[e / 16]);
    y[e] = ds * static_cast<float>((low | (high << 4)) - 32);
  }
}

}  // namespace

bool ggml_type_readable(std::uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void dequantize_ggml(std::uint32_t type, std::span<const std::byte> bytes, std::span<float> out) {
  const std::optional<GgmlTypeInfo> info = ggml_type_info(type);
  if (!info || !ggml_type_readable(type)) {
    throw std::invalid_argument(fmt::format("dequantize_ggml: cannot read {}", ggml_type_name(type)));
  }
  const auto elems = static_cast<std::size_t>(info->block_elems);
  const auto block_bytes = static_cast<std::size_t>(info->block_bytes);
  if (out.size() % elems != 0 || out.size() / elems * block_bytes != bytes.size()) {
    throw std::invalid_argument(fmt::format("dequantize_ggml: {} bytes of {} for {} elements", bytes.size(), info->name,
                                            out.size()));
  }
  const auto* in = reinterpret_cast<const Byte*>(bytes.data());
  float* y = out.data();
  const std::size_t n = out.size();
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      std::memcpy(y, in, 4 * n);
      return;
    case GgmlType::kF16:
      for (std::size_t i = 0; i < n; ++i) y[i] = f16(in + 2 * i);
      return;
    case GgmlType::kBF16:
      for (std::size_t i = 0; i < n; ++i) {
        y[i] = std::bit_cast<float>(static_cast<std::uint32_t>(in[2 * i] | (in[2 * i + 1] << 8)) << 16);
      }
      return;
    default:
      break;
  }
  void (*block)(const Byte*, float*) = nullptr;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kQ8_0: block = q8_0; break;
    case GgmlType::kQ4_0: block = q4_0; break;
    case GgmlType::kQ4_1: block = q4_1; break;
    case GgmlType::kQ5_0: block = q5_0; break;
    case GgmlType::kQ5_1: block = q5_1; break;
    case GgmlType::kQ4_K: block = q4_k; break;
    case GgmlType::kQ5_K: block = q5_k; break;
    case GgmlType::kQ6_K: block = q6_k; break;
    default: throw std::logic_error("dequantize_ggml: unhandled type");
  }
  for (std::size_t b = 0; b < n / elems; ++b) block(in + b * block_bytes, y + b * elems);
}

}  // namespace kvcheck
