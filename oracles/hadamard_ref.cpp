#include "oracles/hadamard_ref.h"

#include <bit>
#include <cmath>
#include <stdexcept>

namespace kvcheck {

std::vector<double> hadamard_matrix_ref(std::int64_t head_dim, std::span<const float> signs) {
  if (head_dim <= 0 || (head_dim & (head_dim - 1)) != 0 ||
      (!signs.empty() && signs.size() != static_cast<std::size_t>(head_dim))) {
    throw std::invalid_argument("hadamard_matrix_ref: head_dim must be a power of two (signs: head_dim)");
  }
  const auto d = static_cast<std::size_t>(head_dim);
  const double norm = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> r(d * d);
  for (std::size_t i = 0; i < d; ++i) {
    for (std::size_t j = 0; j < d; ++j) {
      const double h = (std::popcount(i & j) % 2 == 0) ? 1.0 : -1.0;
      r[i * d + j] = h * (signs.empty() ? 1.0 : static_cast<double>(signs[j])) * norm;
    }
  }
  return r;
}

std::vector<double> hadamard_rotate_ref(std::span<const float> rows, std::int64_t head_dim,
                                        std::span<const float> signs, bool transpose) {
  const std::vector<double> r = hadamard_matrix_ref(head_dim, signs);
  const auto d = static_cast<std::size_t>(head_dim);
  if (rows.size() % d != 0) throw std::invalid_argument("hadamard_rotate_ref: rows are not whole rows of head_dim");
  std::vector<double> out(rows.size(), 0.0);
  for (std::size_t base = 0; base < rows.size(); base += d) {
    for (std::size_t i = 0; i < d; ++i) {
      double s = 0.0;
      for (std::size_t j = 0; j < d; ++j) s += (transpose ? r[j * d + i] : r[i * d + j]) * rows[base + j];
      out[base + i] = s;
    }
  }
  return out;
}

}  // namespace kvcheck
