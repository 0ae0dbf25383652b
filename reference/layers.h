// The element-wise and per-token layers of the Llama family, written for clarity: RMSNorm, RoPE
// (Hugging Face rotate-half convention, plain and llama3-scaled) and the SwiGLU gate.
// Everything is double: the reference computes its whole forward pass in double. `threads` splits
// the rows among threads (<= 0: every core); each row is computed alone, so the bits do not
// depend on it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/config.h"
#include "reference/matrix.h"

namespace kvcheck {

// x: [T, H]; weight: [H].  out[t, i] = x[t, i] / sqrt(mean_i(x[t, i]^2) + eps) * weight[i]
MatrixRMd rmsnorm_ref(const MatrixRMd& x, std::span<const double> weight, double eps, int threads = 1);

// Qwen3's q_norm / k_norm: rmsnorm_ref applied to every head on its own. x: [T, n_heads * head_dim],
// head h in columns [h*head_dim, (h+1)*head_dim); weight: [head_dim].
//   out[t, h*d + i] = x[t, h*d + i] / sqrt(mean_j(x[t, h*d + j]^2) + eps) * weight[i]
MatrixRMd head_rmsnorm_ref(const MatrixRMd& x, std::int64_t n_heads, std::int64_t head_dim,
                           std::span<const double> weight, double eps, int threads = 1);

// RoPE inverse frequencies, [head_dim / 2]:  inv_freq[i] = theta^(-2i / head_dim), then, for
// llama3 scaling, wavelengths longer than original_max / low_freq_factor are divided by `factor`,
// those shorter than original_max / high_freq_factor kept, and the band between interpolated
// smoothly (transformers' _compute_llama3_parameters).
std::vector<double> rope_inv_freq(std::int64_t head_dim, double theta, const RopeScaling& scaling);

// Rotates every head of x in place. x: [T, n_heads * head_dim], head h in columns
// [h*head_dim, (h+1)*head_dim); positions: [T]. Rotate-half pairing, as HF checkpoints expect:
//   x'[i]       = x[i] cos(p w_i) - x[i + d/2] sin(p w_i)
//   x'[i + d/2] = x[i + d/2] cos(p w_i) + x[i] sin(p w_i),      i < d/2, w = inv_freq
void rope_ref(MatrixRMd& x, std::int64_t n_heads, std::int64_t head_dim,
              std::span<const std::int64_t> positions, std::span<const double> inv_freq, int threads = 1);

// gate, up: [T, I].  out = silu(gate) * up,  silu(g) = g / (1 + exp(-g))
MatrixRMd swiglu_ref(const MatrixRMd& gate, const MatrixRMd& up, int threads = 1);

}  // namespace kvcheck
