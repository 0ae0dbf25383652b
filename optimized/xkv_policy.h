// XKV (personalised per-layer KV budgets): SnapKV's prompt selection with a budget per layer
// chosen from the prompt itself.
//
// Each layer's score vector w_l is the attention its prompt tokens get from the last `window`
// queries (the observation window), average-pooled over `pool` neighbours and averaged over the
// layer's kv heads (each the max over its query group), restricted to the tokens before the
// window. Its importance retention ratio at n kept tokens, R_l(n), is the sum of its n largest
// entries over the sum of all of them. Algorithm 1 of the paper hands out tokens one at a time to
// the layer whose next-largest normalised score is the largest: with a total (budget - window
// per layer, so the mean is `budget`) or until the mean retention reaches `retention`. Because
// each layer's normalised scores are sorted, this maximises the sum of the R_l for its total.
// Each kv head of a layer then keeps the window and the n_l tokens its own pooled window sums
// rank highest. Decode keeps every token. Stored in fp16.
//
// Averaged allocation (the paper's offline mode): instead of running Algorithm 1 on every
// request, run it on a sample of requests, average the per-layer counts and reuse that one
// allocation for every request (`layers=n_0/n_1/...`, xkv_average_allocation; `kvcheck verify
// --xkv-calibrate N` computes it on held-out text). With fixed counts each head of layer l keeps
// the window plus the n_l prompt tokens its pooled window sums rank highest, exactly as the
// per-request mode does once it has its allocation; a spec whose count of layers is not the
// model's is an InputError at the first prefill.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "optimized/kv_policy.h"

namespace kvcheck {

// Algorithm 1 on per-layer scores (any non-negative values; each layer is normalised by its own
// sum and sorted here). With total >= 0: exactly min(total, sum of sizes) tokens handed out.
// With total < 0: tokens are handed out until the mean over layers of R_l reaches `retention`.
// Ties go to the lower layer. Layers whose scores sum to 0 take tokens last, in order.
std::vector<std::int64_t> xkv_allocate(const std::vector<std::vector<double>>& scores, std::int64_t total,
                                       double retention = 1.0);

// Average pooling with a centred window of `pool` positions (pool odd), clipped at the ends
// (the mean over the positions inside).
std::vector<float> average_pool(std::span<const float> scores, std::int64_t pool);

// The per-layer score vectors Algorithm 1 runs on, from a prefill's head scores (layer-major,
// kv-head minor, as select_prompt_all gets them): for each layer, the window column sums of its
// first prompt_len - window positions, average-pooled per head, then averaged over the heads.
std::vector<std::vector<double>> xkv_layer_scores(std::int64_t prompt_len, std::int64_t kv_heads,
                                                  std::span<const PromptScores> heads, std::int64_t window,
                                                  std::int64_t pool);

// The averaged allocation of `total` tokens over the layers from sampled requests (samples[s]:
// request s's per-layer scores, xkv_layer_scores). Each request's own allocation is
// xkv_allocate(samples[s], total); layer l's mean over the requests, m_l = S_l / k (S_l the sum
// of its counts, k the number of requests), is rounded by largest remainder: every layer gets
// floor(m_l), and the total - sum floor(m_l) tokens left (fewer than the number of layers) go one
// each to the layers with the largest remainders S_l mod k, ties to the lower layer. The result
// sums exactly to total, each n_l is floor(m_l) or ceil(m_l), and one sample gives that request's
// own allocation. Integer arithmetic throughout, so it is exact. InputError when there is no
// sample or a sample has fewer candidate tokens than total (its allocation would fall short);
// std::invalid_argument when the samples' layer counts differ.
std::vector<std::int64_t> xkv_average_allocation(const std::vector<std::vector<std::vector<double>>>& samples,
                                                 std::int64_t total);

struct XkvParams {
  std::int64_t budget = 64;  // mean prompt tokens per head over the layers (window included)
  double retention = 0.0;    // > 0: allocate until the mean retention reaches it (no budget)
  std::int64_t window = 8;   // observation window, always kept
  std::int64_t pool = 7;     // average-pooling width (odd)
  // Non-empty: fixed prompt tokens per head of each layer besides the window (the averaged
  // allocation); budget and retention are then unused.
  std::vector<std::int64_t> layers;
  // Called at every prefill with xkv_layer_scores of the prompt, before the selection (kvcheck
  // verify --xkv-calibrate records the samples this way).
  std::function<void(const std::vector<std::vector<double>>&)> on_layer_scores;
};

std::unique_ptr<KvPolicy> make_xkv_policy(const XkvParams& params);
std::unique_ptr<KvPolicy> make_xkv_policy(std::int64_t budget, double retention, std::int64_t window,
                                          std::int64_t pool);
// The parameters of an xkv policy, or nullopt for any other policy.
std::optional<XkvParams> xkv_params_of(const KvPolicy& policy);

// Registry entry (optimized/policy_registry.h).
PolicyEntry xkv_policy_entry();

}  // namespace kvcheck
