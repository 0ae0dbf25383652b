// Exact causal attention with grouped-query heads, in double. The oracle every attention kernel
// of the engine is held against (cast float inputs with .cast<double>()).
//
// Blocked (docs/design.md §3): per query head, queries go in blocks of kAttentionBlock rows
// against blocks of kAttentionBlock keys. A key block no query of the block can see is skipped
// whole (above the causal diagonal, or behind the sliding window); the scores of the rest come
// from one dot_rows call (reference/dot_rows.h) per run of consecutive visible blocks
// (S = Q K^T, then * scale),
// and only blocks that some but not all of the block's queries see are masked element by
// element. The softmax takes two passes over a row's scores (the maximum over the visible keys,
// then p_j = exp(s_j - max) summed in key order and divided by the sum) and the output is
// P V, one dot_rows call per run against the values transposed, added in run order. Scratch is allocated once per call and thread. The work items (query head, query
// block) are shared among `threads` threads, each item computed whole by one thread, so the
// result does not depend on the thread count. Values that are not finite fall back to the
// row-by-row sum over keys of nonzero probability, so a masked NaN never reaches an output.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "reference/matrix.h"

namespace kvcheck {

struct AttentionShape {
  std::int64_t n_heads = 0;     // query heads
  std::int64_t n_kv_heads = 0;  // key/value heads; query head h reads kv head h / (n_heads / n_kv_heads)
  std::int64_t head_dim = 0;
  std::int64_t sliding_window = 0;  // 0: none; else key j is visible only if q_pos - k_pos < window
};

// Called once per (query head, query row) with that row's probabilities over all Tk keys
// (exactly 0 for masked keys). The span is only valid during the call.
using AttentionProbsFn = std::function<void(std::int64_t head, std::int64_t query_row, std::span<const double> probs)>;

// q: [Tq, n_heads * head_dim]; k, v: [Tk, n_kv_heads * head_dim]  (head h in columns [h*d, (h+1)*d))
// q_pos: [Tq], k_pos: [Tk]: absolute positions. Key j is visible to query i when
// k_pos[j] <= q_pos[i] (and within the sliding window, if any).
// Returns out: [Tq, n_heads * head_dim], out_i = sum_j softmax_j(q_i . k_j / sqrt(d)) v_j.
// Throws std::invalid_argument on inconsistent shapes or a query that sees no key.
// q, k and v are taken by Eigen::Ref, so row blocks of a larger matrix (a KV cache) pass without a copy.
// threads: worker threads (<= 0: every core); the result is the same bits for any count. With
// on_probs the call runs on one thread and reports rows in order (query row, then head).
MatrixRMd attention_ref(const Eigen::Ref<const MatrixRMd>& q, const Eigen::Ref<const MatrixRMd>& k,
                        const Eigen::Ref<const MatrixRMd>& v,
                        std::span<const std::int64_t> q_pos, std::span<const std::int64_t> k_pos,
                        const AttentionShape& shape, const AttentionProbsFn& on_probs = {}, int threads = 1);

// The shape checks attention_ref makes, for the other exact attentions (oracles/attention_rowwise.h):
// std::invalid_argument, its message starting with `who`, on bad head counts or shapes that disagree.
void check_attention_shapes(const char* who, const Eigen::Ref<const MatrixRMd>& q, const Eigen::Ref<const MatrixRMd>& k,
                            const Eigen::Ref<const MatrixRMd>& v, std::span<const std::int64_t> q_pos,
                            std::span<const std::int64_t> k_pos, const AttentionShape& shape);

// Rows (queries) and keys per block of attention_ref.
inline constexpr std::int64_t kAttentionBlock = 128;

}  // namespace kvcheck
