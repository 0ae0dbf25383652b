// The model runner: the Llama forward pass of the optimized engine over paged, compressed KV,
// driven through a Backend (docs/design.md §3).
//
//   prefill   one request's prompt at positions 0 .. T-1: projections as one GEMM per weight,
//             tiled causal attention over the prompt's own (uncompressed) keys and values, then
//             the keys and values stored in the request's pages in the policy's format;
//   decode    one token for each request of a batch at its next position: its key and value go
//             into a reserved slot of every head first, then paged attention reads every kept
//             token (this one included) through the stored format.
//
// A request's rows never mix with another's: decode projections are batch-invariant (Backend::
// linear) and attention runs per (request, kv-head), so a request's logits are bit-identical
// whatever else is in the batch. Preemption by recompute relies on that and replays a request
// the way it first ran (prefill of the prompt, then its generated tokens fed again one per decode
// step, as rows of whatever batch is running).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "optimized/backend.h"
#include "optimized/engine_weights.h"
#include "optimized/paged_kv_cache.h"

namespace kvcheck {

// What a verification run sees of the runner (kvcheck verify --verify-each-step, the policy
// properties): every key and value row it computes, and every decode head's attention.
struct DecodeHeadTrace {
  std::int64_t request = 0;
  std::int32_t layer = 0, kv_head = 0, position = 0;  // position: the token this step adds
  std::span<const float> q;          // [group][head_dim], post-RoPE (before a rotating policy's rotation)
  std::span<const float> out;        // [group][head_dim], the attention output (rotated back)
  std::span<const float> slot_probs; // per slot of the pages read in walk order: max over the group
  // A page-selecting policy (Quest): the pages the step read, ascending indices into the head's
  // pages in walk order; empty: every page.
  std::span<const std::size_t> pages_read;
};
struct RunnerTrace {
  // Keys and values [tokens][kv_dim] (post-RoPE, before a rotating policy's rotation) of `tokens`
  // positions from `first` in `layer`: a whole prompt at prefill (before any eviction), one token
  // per decode step.
  std::function<void(std::int64_t request, std::int32_t layer, std::int32_t first, std::int64_t tokens,
                     std::span<const float> keys, std::span<const float> values)>
      on_kv;
  // After each decode step's attention of a head (the cache then holds what it attended to;
  // the scores of an accumulating policy are updated after this call).
  std::function<void(const DecodeHeadTrace&)> on_decode_head;
  // A decode step's decision to move a head's token from the high tier to the low one (made
  // before the step; if the step then fails with PoolExhausted it is made again on the retry).
  std::function<void(std::int64_t request, std::int32_t layer, std::int32_t kv_head, std::int32_t position)>
      on_demote;
  // A prefill's head scores (layer-major, kv-head minor), just before the policy selects the prompt
  // tokens from them (policies that select only).
  std::function<void(std::int64_t request, std::int64_t kv_heads, std::span<const PromptScores> heads)>
      on_prompt_scores;
};

class ModelRunner {
 public:
  // The runner keeps references: weights, backend and cache must outlive it.
  ModelRunner(const EngineWeights& weights, Backend& backend, PagedKvCache& cache);

  const EngineWeights& weights() const { return weights_; }
  PagedKvCache& cache() { return cache_; }

  // Prefills `request` (which must not be in the cache) with `tokens` at positions 0 .. T-1 and
  // returns the logits of the last position [vocab]; all_logits, if given, receives every
  // position's [T][vocab]. InputError for an empty prompt, an id out of range or a prompt longer
  // than max_position_embeddings (naming the request); PoolExhausted, before any compute, when
  // the prompt's pages do not fit (the request is then not in the cache).
  std::vector<float> prefill(std::int64_t request, std::span<const std::int32_t> tokens,
                             std::vector<float>* all_logits = nullptr);

  // Prefix reuse (the scheduler's prefix cache) needs a prefill whose rows do not depend on how
  // much of the prompt it computes: projections through Backend::linear (batch-invariant), and
  // attention over the prompt's keys and values as the cache stores them (read back after the
  // write), so that a prefix taken from the cache and one computed here give the same bits, as
  // in an engine whose prefill reads the cache (vLLM). Off by default: the report's and verify's
  // prefill is one blocked GEMM per weight and attends over the unrounded prompt. InputError
  // when the policy is not prefix-closed (KvPolicy::prefix_closed).
  void set_reusable_prefill(bool on);
  bool reusable_prefill() const { return reusable_prefill_; }
  // Prefill of a request whose first `cached` prompt tokens are already in its pages and whose
  // other pages are reserved (PagedKvCache::reserve_prompt_after_prefix): computes positions
  // cached .. T-1 only, and returns the last position's logits, the bits prefill() would give
  // in reusable mode. logic_error unless reusable and 0 < cached < T.
  std::vector<float> prefill_after_prefix(std::int64_t request, std::span<const std::int32_t> tokens,
                                          std::int64_t cached);

  // One decode step: tokens[i] of requests[i] at positions[i] (each request's next position).
  // Returns logits [batch][vocab], or, given logit_rows (ascending row indices), those rows'
  // only [logit_rows.size()][vocab] (the same bits: the lm_head is batch-invariant); a row left
  // out still stores its key and value (the scheduler's replay after a preemption by recompute).
  // PoolExhausted, before any compute and with nothing reserved, when a head needs a page the
  // pool does not have.
  std::vector<float> decode(std::span<const std::int64_t> requests, std::span<const std::int32_t> tokens,
                            std::span<const std::int32_t> positions,
                            const std::vector<std::size_t>* logit_rows = nullptr);
  // The same into `logits`, resized: a caller that keeps the vector from step to step reuses its
  // memory (a batch's logits are megabytes for a real vocabulary: a fresh vector is a fresh
  // mapping, zeroed by page faults and unmapped when freed, every step).
  void decode_into(std::span<const std::int64_t> requests, std::span<const std::int32_t> tokens,
                   std::span<const std::int32_t> positions, const std::vector<std::size_t>* logit_rows,
                   std::vector<float>& logits);

  // Observe every step (null: none). The trace must outlive its use.
  void set_trace(const RunnerTrace* trace) { trace_ = trace; }

 private:
  void check_tokens(std::int64_t request, std::span<const std::int32_t> tokens, std::int64_t pos0) const;
  // Prefill of prompt positions first .. T-1 (first > 0: reusable mode, the rest cached).
  std::vector<float> prefill_rows(std::int64_t request, std::span<const std::int32_t> tokens, std::int64_t first,
                                  std::vector<float>* all_logits);
  // x += o_proj(attention) and x += down(swiglu(gate, up)) for one layer of a decode batch.
  void mlp(const EngineLayer& layer, std::vector<float>& x, std::int64_t rows, bool prefill);

  const EngineWeights& weights_;
  Backend& backend_;
  PagedKvCache& cache_;
  const RunnerTrace* trace_ = nullptr;
  bool reusable_prefill_ = false;
};

}  // namespace kvcheck
