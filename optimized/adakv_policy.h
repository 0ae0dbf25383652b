// Ada-KV (head-wise adaptive budgets) over SnapKV's or PyramidKV's prompt selection.
//
// SnapKV and PyramidKV give every kv head of a layer the same prompt budget b (window included).
// Ada-KV keeps the layer's total, kv_heads * b, but hands it out jointly over the layer's heads:
// a head whose observation-window attention is spread over many tokens takes more of it, a head
// that attends to a few tokens gives the rest away. Per layer of a prompt of n > b tokens:
//
//   budget   b = `budget` (base=snapkv) or PyramidKV's budget of the layer (base=pyramidkv,
//            pyramid_budgets with `ratio`); every head keeps the observation window (the last
//            `window` prompt positions), and the layer's kv_heads * (b - window) other slots are
//            shared among its heads;
//   scores   SnapKV's: each candidate's (a position before the window) attention from the window's
//            queries, max-pooled over `pool` neighbours (the maximum over the kv head's query
//            group). Every query's attention sums to 1, so the scores of different heads are on
//            one scale and can be ranked together;
//   floor    the safeguard: every head first takes its own top f = ceil(floor * (b - window))
//            candidates, so that no head is starved (any floor > 0 keeps at least one, which is
//            usually the head's attention sink);
//   joint    the kv_heads * (b - window - f) slots left go to the highest-scoring (head, token)
//            pairs not yet taken, across the layer's heads (ties: the lower head, then the lower
//            position).
//
// Each head's count is window + f + its share; the counts of a layer sum exactly to kv_heads * b.
// floor = 1 is SnapKV (PyramidKV) itself. A prompt of at most b tokens is kept whole. Decode keeps
// every generated token. Stored in fp16.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "optimized/kv_policy.h"

namespace kvcheck {

// The joint allocation of one layer: scores[h] is head h's score of each of its `candidates`
// positions (all heads have as many); every head takes its top `floor` positions, then the
// heads * per_head - heads * floor slots left go to the highest-scoring pairs across the heads
// (ties: lower head, then lower position). Returns each head's kept positions, ascending; the
// counts sum to heads * min(per_head, candidates). std::invalid_argument when floor > per_head or
// the heads' score vectors differ in length.
std::vector<std::vector<std::int32_t>> adakv_select(const std::vector<std::vector<float>>& scores, std::int64_t per_head,
                                                    std::int64_t floor);

enum class AdaKvBase { kSnapKv, kPyramidKv };

struct AdaKvParams {
  std::int64_t budget = 64;  // prompt tokens per head on average over a layer's heads (window included)
  AdaKvBase base = AdaKvBase::kSnapKv;
  double floor = 0.2;        // share of b - window every head keeps on its own
  double ratio = 20;         // base=pyramidkv: first-to-last layer budget ratio
  std::int64_t window = 32;  // observation window, always kept
  std::int64_t pool = 7;     // max-pooling width (odd)
};

std::unique_ptr<KvPolicy> make_adakv_policy(const AdaKvParams& params);
// The layer's prompt budget b of a prompt of `prompt` tokens in a model of `layers` layers.
std::int64_t adakv_layer_budget(const AdaKvParams& params, std::int32_t layer, std::int32_t layers, std::int64_t prompt);
// The floor f of a layer of budget b: ceil(floor * (b - window)).
std::int64_t adakv_floor_tokens(const AdaKvParams& params, std::int64_t layer_budget);

// Registry entry (optimized/policy_registry.h).
PolicyEntry adakv_policy_entry();

}  // namespace kvcheck
