// Attention over a given retained + dequantized set (docs/design.md §7: the per-step
// oracle): exact attention, in double, for one kv head's group of query heads over an explicit
// list of tokens, already dequantized to floats. The paged decode kernel
// (kernels/cpu/paged_attention.h) must equal it within float tolerance on the tokens it holds.
// And the column / window attention sums of causal prefill, from reference/attention.h's
// attention_ref, for kernels/cpu/prefill_attention.h. Plain loops, no tiling, on purpose (the dot
// products four keys at a time, each summed as the plain loop sums it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reference/matrix.h"

namespace kvcheck {

struct RetainedAttentionRef {
  std::vector<double> out;    // [group][head_dim]
  std::vector<double> probs;  // [group][n]
};

// out[j] = scale * Σ_c q_c k_jc for each of the n keys ([n][d]), q and k widened to double and
// each sum taken in c order: the plain loop's bits. Four keys at a time, so that four sums are in
// flight rather than one dependent chain of adds (the per-step oracle's time at 8K tokens).
void scaled_dots_ref(const float* q, const float* keys, std::int64_t n, std::int64_t d, double scale, double* out);

// q: [group][head_dim]; keys, values: [n][head_dim] (the retained tokens, dequantized), n >= 1.
// p_gj = softmax_j(scale * q_g · k_j), out_g = Σ_j p_gj v_j, all in double.
// std::invalid_argument on inconsistent sizes or n == 0.
RetainedAttentionRef retained_attention_ref(std::span<const float> q, std::span<const float> keys,
                                            std::span<const float> values, std::int64_t group, std::int64_t head_dim,
                                            double scale);

struct PrefillColumnSumsRef {
  MatrixRMd out;                     // [tokens][n_heads * head_dim]
  std::vector<double> column_sums;   // [n_heads][tokens]: Σ_i p(i, j) over every query i
  std::vector<double> window_sums;   // [n_heads][tokens]: Σ over the last min(window, tokens) queries
};

// Causal self-attention of positions 0..tokens-1 (scale 1/sqrt(head_dim), as attention_ref):
// q: [tokens][n_heads * head_dim]; k, v: [tokens][n_kv_heads * head_dim] (floats, cast to double).
PrefillColumnSumsRef prefill_column_sums_ref(std::span<const float> q, std::span<const float> k,
                                             std::span<const float> v, std::int64_t tokens, std::int64_t n_heads,
                                             std::int64_t n_kv_heads, std::int64_t head_dim, std::int64_t window);

}  // namespace kvcheck
