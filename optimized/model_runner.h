// The model runner: the Llama forward pass of the optimized engine over paged, compressed KV,
// driven through a Backend (docs/design.md §3).
//
//   prefill   one request's prompt at positions 0 .. T-1: projections as one GEMM per weight,
//             tiled causal attention over the prompt's own (uncompressed, unrotated) keys and
//             values, then the keys and values stored in the request's pages in the policy's
//             format (a rotating policy's rotation of them);
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
#include <memory>
#include <span>
#include <string>
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
  // After each decode step: the batch's requests and the logits it returns ([rows][vocab], the
  // rows asked for), so two engines' steps can be compared bit for bit (HostTwinProps.*).
  std::function<void(std::span<const std::int64_t> requests, std::span<const float> logits)> on_logits;
  // A prefill's head scores (layer-major, kv-head minor), just before the policy selects the prompt
  // tokens from them (policies that select only).
  std::function<void(std::int64_t request, std::int64_t kv_heads, std::span<const PromptScores> heads)>
      on_prompt_scores;
};

// A prompt's prefill, computed once and stored by many policies (docs/design.md §3, "Shared
// prefill"). The non-reusable prefill's projections and attention run over the unrounded,
// unrotated prompt, so everything up to the moment a policy stores the prompt is the same for
// every policy: ModelRunner::capture_prefill computes it without touching a cache, and
// ModelRunner::prefill_from_capture stores it as prefill() would. What a capture holds:
struct PrefillCaptureOptions {
  // PromptScores::all (column sums over every query): what a prompt-selecting policy
  // (KvPolicy::selects_prompt) ranks by. Implied by a window.
  bool scores = false;
  // The observation windows (KvPolicy::observation_window) whose sums to keep; 0 and repeats are
  // ignored. The first is summed with the column sums; each other one costs attention over its
  // own last queries only (Backend::prefill_attention with first_query = T - window).
  std::vector<std::int64_t> windows;
  bool all_logits = false;  // every position's logits too (engine_generate's keep_logits)

  // Widens these options to serve `policy` too (its scores and window). Any rotation is served:
  // a rotating policy's non-reusable prefill attends unrotated and rotates copies as it stores.
  void cover(const KvPolicy& policy);
};
struct PrefillCapture {
  std::vector<std::int32_t> tokens;  // the prompt, positions 0 .. T-1
  PrefillCaptureOptions options;     // what was asked (windows: the distinct positive ones, ascending)
  std::int64_t layers = 0, kv_heads = 0, kv_dim = 0;
  // Per layer, [T][kv_dim]: post-RoPE keys and values before any rotation, the rows
  // RunnerTrace::on_kv sees (a rotating policy's store rotates copies).
  std::vector<std::vector<float>> keys, values;
  // [layer * kv_heads + head][T]: the column sums, max over the kv head's query group (empty
  // without options.scores).
  std::vector<std::vector<float>> scores;
  // Per entry of options.windows, the window sums in the same layout.
  std::vector<std::vector<std::vector<float>>> window_scores;
  std::vector<float> logits;      // the last position's [vocab]
  std::vector<float> all_logits;  // [T][vocab] with options.all_logits, else empty

  std::int64_t prompt_tokens() const { return static_cast<std::int64_t>(tokens.size()); }
  // Why `policy` cannot start from this capture (scores or a window not captured), or empty
  // when it can.
  std::string mismatch(const KvPolicy& policy) const;
  // std::invalid_argument naming the request unless `prompt` is this capture's prompt.
  void check_prompt(std::int64_t request, std::span<const std::int32_t> prompt) const;
  // Bytes held (keys, values, scores, logits): 30 layers x 8192 x 192 x 2 floats = 377 MB for an
  // 8K prompt of SmolLM2-135M. Share one capture by reference; never copy it per policy.
  std::int64_t bytes() const;
};

// A page-selecting policy's (Quest's) choice of a head's pages from its group's queries q
// [group][d]: `pages` cut to the chosen ones, walk order kept; `chosen` their indices.
void select_read_pages(const KvPolicy& policy, std::span<const TierRead> tiers, std::int64_t d, std::int64_t group,
                       std::span<const float> q, std::vector<PageRead>& pages, std::vector<std::size_t>& chosen);

class ModelRunner {
 public:
  // The runner keeps references: weights, backend and cache must outlive it.
  ModelRunner(const EngineWeights& weights, Backend& backend, PagedKvCache& cache);
  ~ModelRunner();

  const EngineWeights& weights() const { return weights_; }
  PagedKvCache& cache() { return cache_; }

  // Prefills `request` (which must not be in the cache) with `tokens` at positions 0 .. T-1 and
  // returns the logits of the last position [vocab]; all_logits, if given, receives every
  // position's [T][vocab]. InputError for an empty prompt, an id out of range or a prompt longer
  // than max_position_embeddings (naming the request); PoolExhausted, before any compute, when
  // the prompt's pages do not fit (the request is then not in the cache).
  std::vector<float> prefill(std::int64_t request, std::span<const std::int32_t> tokens,
                             std::vector<float>* all_logits = nullptr);

  // The non-reusable prefill of `tokens` (positions 0 .. T-1) without a cache: what prefill()
  // computes before it stores anything, kept for prefill_from_capture (PrefillCapture). Reads
  // neither the cache nor its policy, fires no trace hook. InputError as prefill() (the request
  // named -1). Any runner over the same model and backend kind gives the same bits (they do not
  // depend on the thread count).
  PrefillCapture capture_prefill(std::span<const std::int32_t> tokens, const PrefillCaptureOptions& options) const;
  // Stores `capture`'s prompt in `request`'s pages exactly as prefill(request, tokens, all_logits)
  // would, from the same bits: every key and value row (a selecting policy's choice from the
  // captured scores), the RunnerTrace hooks prefill() fires (on_kv per layer, on_prompt_scores)
  // with the same spans, and the same logits. Only the store runs: no projection, no attention.
  // std::invalid_argument naming the request when `tokens` is not the capture's prompt;
  // std::logic_error when the policy cannot start from it (PrefillCapture::mismatch), when
  // all_logits is asked of a capture without them, or in reusable mode; PoolExhausted before
  // anything is stored when the prompt does not fit (the request is then not in the cache).
  std::vector<float> prefill_from_capture(std::int64_t request, std::span<const std::int32_t> tokens,
                                          const PrefillCapture& capture, std::vector<float>* all_logits = nullptr);

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
  // The forward pass over a prompt's positions first .. T-1 that prefill_rows and capture_prefill
  // share, with their hooks (model_runner.cpp).
  struct PromptPass;
  std::vector<float> forward_prompt(const PromptPass& pass, std::span<const std::int32_t> tokens,
                                    std::vector<float>* all_logits) const;
  // x += o_proj(attention) and x += down(swiglu(gate, up)) for one layer of a decode batch or a
  // prompt (prefill: untimed; gemm: Backend::linear_prefill, else the batch-invariant linear).
  void mlp(const EngineLayer& layer, std::vector<float>& x, std::int64_t rows, bool prefill, bool gemm) const;
  // The decode step's compute on a resident backend (docs/design.md §15), after the reservation:
  // inputs, write targets and page-table deltas up, the layers on resident buffers, logits down.
  struct Resident;
  void decode_resident(ResidentBackend& r, std::span<const std::int64_t> requests, std::span<const std::int32_t> tokens,
                       std::span<const std::int32_t> positions, const std::vector<std::size_t>* logit_rows,
                       std::vector<float>& logits);

  const EngineWeights& weights_;
  Backend& backend_;
  PagedKvCache& cache_;
  const RunnerTrace* trace_ = nullptr;
  bool reusable_prefill_ = false;
  std::unique_ptr<Resident> resident_;  // buffers and the page-table mirror, made on the first resident step
};

}  // namespace kvcheck
