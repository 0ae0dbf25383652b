#include "optimized/greedy_decoding.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "reference/errors.h"

namespace kvcheck {

std::int32_t greedy_token(std::int64_t request, std::span<const float> logits, std::int64_t position) {
  std::int32_t best = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) {
      throw InputError(fmt::format("request {}: logit {} at position {} is NaN (the forward pass produced a NaN)",
                                   request, i, position));
    }
    if (logits[i] > logits[static_cast<std::size_t>(best)]) best = static_cast<std::int32_t>(i);
  }
  return best;
}

const char* greedy_stop_reason(const ModelConfig& config, std::int64_t prompt_tokens,
                               std::span<const std::int32_t> generated, std::int64_t max_new_tokens,
                               bool stop_at_eos) {
  const auto& eos = config.eos_token_ids;
  if (stop_at_eos && !generated.empty() && std::find(eos.begin(), eos.end(), generated.back()) != eos.end()) {
    return "eos";
  }
  const auto n = static_cast<std::int64_t>(generated.size());
  if (n >= max_new_tokens) return "max_new_tokens";
  if (prompt_tokens + n >= config.max_position_embeddings) return "max_position_embeddings";
  return nullptr;
}

}  // namespace kvcheck
