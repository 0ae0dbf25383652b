#include "kernels/cpu/hadamard_rotate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvcheck {
namespace {

void check_shape(std::span<float> rows, std::int64_t head_dim, std::span<const float> signs) {
  if (!hadamard_fits(head_dim) || rows.size() % static_cast<std::size_t>(head_dim) != 0 ||
      (!signs.empty() && signs.size() != static_cast<std::size_t>(head_dim))) {
    throw std::invalid_argument("hadamard_rotate: head_dim must be a power of two dividing the rows (signs: head_dim)");
  }
}

// x [d] ← H·x/√d: butterflies over pairs (i, i + h) for h = 1, 2, 4, ..., d/2.
void fwht_row(float* x, std::int64_t d, float norm) {
  for (std::int64_t h = 1; h < d; h *= 2) {
    for (std::int64_t i = 0; i < d; i += 2 * h) {
      for (std::int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  for (std::int64_t c = 0; c < d; ++c) x[c] *= norm;
}

}  // namespace

bool hadamard_fits(std::int64_t head_dim) { return head_dim > 0 && (head_dim & (head_dim - 1)) == 0; }

std::vector<float> hadamard_signs(std::uint64_t seed, std::int64_t head_dim) {
  std::vector<float> s(static_cast<std::size_t>(std::max<std::int64_t>(head_dim, 0)));
  for (std::size_t i = 0; i < s.size(); ++i) {
    std::uint64_t x = seed + 0x9e3779b97f4a7c15ULL * (i + 1);  // splitmix64
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    s[i] = (x & 1) ? -1.0f : 1.0f;
  }
  return s;
}

void hadamard_rotate(std::span<float> rows, std::int64_t head_dim, std::span<const float> signs) {
  check_shape(rows, head_dim, signs);
  const auto norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  for (std::size_t r = 0; r < rows.size(); r += static_cast<std::size_t>(head_dim)) {
    float* x = rows.data() + r;
    if (!signs.empty()) {
      for (std::int64_t c = 0; c < head_dim; ++c) x[c] *= signs[static_cast<std::size_t>(c)];
    }
    fwht_row(x, head_dim, norm);
  }
}

void hadamard_unrotate(std::span<float> rows, std::int64_t head_dim, std::span<const float> signs) {
  check_shape(rows, head_dim, signs);
  const auto norm = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  for (std::size_t r = 0; r < rows.size(); r += static_cast<std::size_t>(head_dim)) {
    float* x = rows.data() + r;
    fwht_row(x, head_dim, norm);
    if (!signs.empty()) {
      for (std::int64_t c = 0; c < head_dim; ++c) x[c] *= signs[static_cast<std::size_t>(c)];
    }
  }
}

}  // namespace kvcheck
