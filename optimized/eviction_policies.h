// Eviction policies (docs/design.md §8): every kept token is stored in fp16 (the
// full-fp16 cache they are compared against), and a head holds at most a budget of tokens.
//
//   streaming  StreamingLLM: the first `sinks` positions (attention sinks) and the `window` most
//              recent ones. Prefill keeps exactly those; each decode step past the budget drops
//              the oldest token that is not a sink.
//   h2o        H2O: a `budget` split into a recent window (round(budget * recent) positions,
//              the one being added included) and heavy hitters, the tokens with the largest
//              accumulated attention. Prefill ranks the older prompt tokens by the attention they
//              received from every prompt query; each decode step adds that step's attention
//              to every live token's score and, past the budget, drops the lowest-scored token
//              outside the recent window (ties: the oldest), one per step.
//   snapkv     SnapKV: selection once, at prefill. The last `window` prompt queries (the
//              observation window) vote: each older token's attention from them, max-pooled
//              over `pool` neighbouring positions, ranks it; the top budget - window of them and
//              the window itself are kept. Decode never evicts.
//   pyramidkv  PyramidKV: SnapKV's selection with a budget per layer, decreasing linearly with
//              depth (more tokens where attention is broad, fewer where it has funnelled): the
//              last layer gets budget / ratio (at least window + 1), the first 2 * budget minus
//              that, the layers between are interpolated, so the mean stays `budget`.
//
// Scores of a kv head are the maximum over its group's query heads (LeanKV's GQA aggregation).
// Ties between equal scores always go to the older position, so every choice is deterministic.
#pragma once

#include <cstdint>
#include <memory>

#include "optimized/kv_policy.h"

namespace kvcheck {

std::unique_ptr<KvPolicy> make_streaming_policy(std::int64_t sinks, std::int64_t window);
std::unique_ptr<KvPolicy> make_h2o_policy(std::int64_t budget, double recent);
std::unique_ptr<KvPolicy> make_snapkv_policy(std::int64_t budget, std::int64_t window, std::int64_t pool);
std::unique_ptr<KvPolicy> make_pyramidkv_policy(std::int64_t budget, double ratio, std::int64_t window,
                                                std::int64_t pool);

// The policies' selection rules, exposed for the tests' independent checks.
// The `count` positions of [0, candidates) with the largest score (ties: the lower position),
// ascending.
std::vector<std::int32_t> top_positions(std::span<const float> scores, std::int64_t candidates, std::int64_t count);
// PyramidKV's prompt budget of each of `layers` layers, first to last, for a prompt of `prompt`
// tokens: linear from 2 * mean - last down to last = max(window + 1, mean / ratio). A first layer
// wider than the prompt is capped at it and the surplus moves to the deeper layers (the total stays
// layers * mean); a prompt of at most `mean` tokens is kept whole in every layer.
std::vector<std::int64_t> pyramid_budgets(std::int64_t mean, double ratio, std::int64_t window, std::int32_t layers,
                                          std::int64_t prompt);
// Max pooling with a centred window of `pool` positions (pool odd), clipped at the ends.
std::vector<float> max_pool(std::span<const float> scores, std::int64_t pool);

// Registry entries (optimized/policy_registry.h).
PolicyEntry streaming_policy_entry();
PolicyEntry h2o_policy_entry();
PolicyEntry snapkv_policy_entry();
PolicyEntry pyramidkv_policy_entry();

}  // namespace kvcheck
