// Float row operations shared by the CPU attention kernels (paged decode and tiled prefill).
// Deterministic: no reassociation beyond what is written (kernels/ builds with
// -ffp-contract=off and no fast-math), so a row's result never depends on its neighbours.
#pragma once

#include <bit>
#include <cstdint>

namespace kvcheck::row_ops {

// quant::f16_to_float with a bit mask in place of its branch (the same two formulas, so the same
// bits for every input): loops over it vectorise, which a per-element branch prevents.
inline float f16_to_float_select(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000U) << 16;
  const std::uint32_t em = h & 0x7FFFU;
  const std::uint32_t finite = std::bit_cast<std::uint32_t>(std::bit_cast<float>(em << 13) * 0x1.0p112f);
  const std::uint32_t special = 0x7F800000U | ((em & 0x03FFU) << 13);  // inf, NaN
  const std::uint32_t is_special = 0U - static_cast<std::uint32_t>(em >= 0x7C00U);  // all ones or zero
  return std::bit_cast<float>(sign | (special & is_special) | (finite & ~is_special));
}

// x[i] = quant::f16_to_float(h[i]), i < n.
inline void f16_row_to_float(const std::uint16_t* h, std::int64_t n, float* x) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = f16_to_float_select(h[i]);
}

// Eight independent partial sums: the compiler can keep them in one vector register without
// reassociating anything, and the result is deterministic.
inline float dot(const float* a, const float* b, std::int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += a[c + l] * b[c + l];
  }
  float tail = 0.0f;
  for (; c < n; ++c) tail += a[c] * b[c];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])) + tail;
}

// y += w * x
inline void axpy(float w, const float* x, float* y, std::int64_t n) {
  for (std::int64_t c = 0; c < n; ++c) y[c] += w * x[c];
}

// y *= w
inline void scale_row(float w, float* y, std::int64_t n) {
  for (std::int64_t c = 0; c < n; ++c) y[c] *= w;
}

}  // namespace kvcheck::row_ops
