// How concentrated a model's attention is, per layer and KV head: the attention-structure report
// that tells whether eviction and quantization policies have something to exploit (attention
// sinks on the first token, heads that need few tokens for most of their mass).
//
// For one distribution p over the keys at positions 0 .. n - 1 (the query's causal context):
//   first_token_mass  p_0
//   top10_share       the mass of the ceil(0.1 n) largest p_j
//   tokens_for_95     the fewest keys holding 95% of the mass (p sorted descending, cumulated until
//                     it reaches 0.95 - 1e-12; the slack absorbs rounding in sums of exactly 0.95)
//   frac_for_95       tokens_for_95 / n
// Per (layer, KV head) the distribution is the mean of the probabilities of the query heads of
// its GQA group; the reported numbers are means over the last `last_queries` query positions of
// every prompt (all positions of a shorter prompt).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "oracles/eval_progress.h"
#include "reference/model.h"

namespace kvcheck {

struct AttentionConcentration {
  double first_token_mass = 0.0;
  double top10_share = 0.0;
  std::int64_t tokens_for_95 = 0;
  double frac_for_95 = 0.0;
};

// std::invalid_argument when probs is empty.
AttentionConcentration attention_concentration(std::span<const double> probs);

struct HeadAttentionStats {
  std::int64_t layer = 0;
  std::int64_t kv_head = 0;
  std::int64_t samples = 0;  // query positions averaged over, all prompts together
  double first_token_mass = 0.0;
  double top10_share = 0.0;
  double tokens_for_95 = 0.0;  // a mean, so not an integer
  double frac_for_95 = 0.0;
};

// Full forward of each prompt with an AttentionRecorder; one entry per (layer, KV head), layer
// major. Prompts must fit max_position_embeddings (InputError naming "attention prompt N").
// std::invalid_argument when prompts is empty or last_queries < 1.
std::vector<HeadAttentionStats> attention_structure(const ReferenceModel& model,
                                                    std::span<const std::vector<std::int32_t>> prompts,
                                                    std::int64_t last_queries, const ProgressFn& progress = {});

}  // namespace kvcheck
