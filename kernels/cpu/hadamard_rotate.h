// The randomised Walsh–Hadamard rotation of rows of one head (QuaRot, TurboQuant): R = H·D/√d,
// H the d×d Sylvester Hadamard matrix (H_ij = (-1)^popcount(i & j)), D = diag(signs) a ±1
// diagonal (all +1: the plain normalised Hadamard), d = head_dim a power of two. R is orthonormal,
// so q·k, ‖v‖ and every 2-norm are unchanged; the rotated policies (rotate=hadamard) rotate keys
// after RoPE, queries and values before the cache stores them, and rotate the attention output
// back with R^T = D·H/√d. The oracle twin is oracles/hadamard_ref.h's dense double matrix.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvcheck {

// Whether head_dim is a power of two (the fast transform's only shape).
bool hadamard_fits(std::int64_t head_dim);

// The ±1 diagonal of the rotation with `seed` (splitmix64 of seed + i, low bit): [head_dim].
std::vector<float> hadamard_signs(std::uint64_t seed, std::int64_t head_dim);

// rows [n][head_dim] in place: row ← R·row = H·(signs ∘ row)/√d; signs [head_dim] (empty: all +1).
// The transform is log2(d) butterfly stages in float, then one multiply by 1/√d.
// std::invalid_argument unless head_dim is a power of two dividing rows.size().
void hadamard_rotate(std::span<float> rows, std::int64_t head_dim, std::span<const float> signs);

// The inverse: row ← R^T·row = signs ∘ (H·row)/√d.
void hadamard_unrotate(std::span<float> rows, std::int64_t head_dim, std::span<const float> signs);

}  // namespace kvcheck
