// Float row operations shared by the CPU attention kernels (paged decode and tiled prefill).
// Deterministic: no reassociation beyond what is written (kernels/ builds with
// -ffp-contract=off and no fast-math), so a row's result never depends on its neighbours.
#pragma once

#include <cstdint>

namespace kvcheck::row_ops {

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
