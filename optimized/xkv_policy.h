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
#pragma once

#include <cstdint>
#include <memory>
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

std::unique_ptr<KvPolicy> make_xkv_policy(std::int64_t budget, double retention, std::int64_t window,
                                          std::int64_t pool);

}  // namespace kvcheck
