// The oracle twin of kernels/cpu/hadamard_rotate.h: the rotation R = H·D/√d as a dense
// double-precision matrix, written from its definition (H_ij = (-1)^popcount(i & j)), not from
// the butterflies, and applied by plain matrix-vector products.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvcheck {

// R [head_dim][head_dim] row-major: R_ij = (-1)^popcount(i & j) · signs_j / √d (signs empty: +1).
std::vector<double> hadamard_matrix_ref(std::int64_t head_dim, std::span<const float> signs);

// rows [n][head_dim] → R·row for each row (transpose: R^T·row), in double.
std::vector<double> hadamard_rotate_ref(std::span<const float> rows, std::int64_t head_dim,
                                        std::span<const float> signs, bool transpose = false);

}  // namespace kvcheck
