// Tiled causal prefill attention with column attention sums, CPU twin (MiniKV's two-pass
// selective attention; docs/design.md §7).
//
// Pass one is flash attention: per query tile, the key tiles up to the diagonal, an online
// softmax (running max m_i, running sum l_i, the output row as accumulator, rescaled when the max
// grows); it leaves each row's log-sum-exp lse_i = m_i + log l_i. Pass two (only when column or
// window sums are asked for) adds p(i, j) = exp(s_ij - lse_i) into the column sums: the scores a
// policy (SnapKV, H2O, MiniKV) ranks tokens by, without ever holding a tokens x tokens matrix. It
// is fused into pass one: a query tile keeps its raw scores against every key tile up to the
// diagonal (a strip of tile x tokens floats) and, as soon as its rows' lse are final, adds their
// p into the sums, so QKᵀ is computed once. Scratch per worker thread is tile² + 2 tile floats,
// plus tile + ⌈tokens / tile⌉ · tile² floats (the lse of the tile's rows and the strip) when the
// sums are asked for: linear in tokens (2 MiB per worker at 8K tokens, tile 64).
//
// The oracle is reference/attention.h attention_ref (double) and, for the sums,
// oracles/retained_attention.h prefill_column_sums_ref.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/dense_ops.h"  // LinearIsa

namespace kvcheck {

struct PrefillAttentionInput {
  std::int64_t tokens = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0.0f;                        // usually 1/sqrt(head_dim)
  std::span<const float> q;                  // [tokens - first_query][n_heads * head_dim], post-RoPE
  std::span<const float> k, v;               // [tokens][n_kv_heads * head_dim], positions 0..tokens-1
  // The queries (and output rows) are positions first_query .. tokens-1: a prompt whose first
  // keys and values are already cached (prefix reuse). Each row's result has the same bits as
  // with first_query 0: a row's key tiles start at key 0 whatever tile holds the row. No column
  // sums with first_query > 0; window sums when first_query <= tokens - min(window, tokens)
  // (the window's queries all computed), with the bits of the whole prompt's window sums: a
  // window's sums for the cost of its own rows (ModelRunner::capture_prefill's extra windows).
  std::int64_t first_query = 0;
  std::int64_t tile = 64;                    // query and key tile size
  std::int64_t window = 0;                   // observation window: the last `window` queries (0: none)
  int threads = 1;                           // heads split over this many threads (kernels/cpu/parallel_for.h)
};

struct PrefillAttentionOutput {
  std::span<float> out;                      // [tokens - first_query][n_heads * head_dim]
  std::span<float> column_sums = {};         // empty or [n_heads][tokens]: Σ_i p(i, j) over all queries i
  std::span<float> window_sums = {};         // empty or [n_heads][tokens]: Σ over the last min(window, tokens) queries
  std::int64_t* scratch_bytes = nullptr;     // when set: receives the bytes of scratch this call allocated
};

// GQA: query head h reads kv head h / (n_heads / n_kv_heads). Key j is visible to query i iff
// j <= i. Float accumulation. InputError (naming the field) for bad shapes or span sizes.
// The tile loops run in the ISA prefill_attention_isa() picks (AVX-512 or AVX2 + F16C where the CPU
// has them, else the baseline build); the overload taking `isa` runs the one asked for (std::invalid_argument
// where this CPU lacks it). Every ISA and thread count gives the same bits: the same float
// operations per element in the same order, without FMA (docs/design.md §9).
void prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out);
void prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out, LinearIsa isa);
LinearIsa prefill_attention_isa();

// The checks prefill_attention makes before computing (the CUDA version makes them too).
void check_prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out);

// Bytes of scratch memory prefill_attention allocates for these inputs (exact): column_sums says
// whether pass two runs (column or window sums asked for).
std::int64_t prefill_attention_scratch_bytes(const PrefillAttentionInput& in, bool column_sums);

}  // namespace kvcheck
