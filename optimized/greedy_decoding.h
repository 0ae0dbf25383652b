// The greedy decoding rules the engine shares between single-request generation
// (optimized/engine.h) and the scheduler, written once so they cannot drift apart; they are the
// reference's rules (reference/generate.h).
#pragma once

#include <cstdint>
#include <span>

#include "reference/config.h"

namespace kvcheck {

// Index of the largest logit, the lowest among ties. InputError naming the request and position
// when a logit is NaN.
std::int32_t greedy_token(std::int64_t request, std::span<const float> logits, std::int64_t position);

// Why generation stops after `generated`, or nullptr to go on. EOS first (when stop_at_eos and
// the last generated token is one of the config's eos ids), then the token budget, then the
// context ("eos", "max_new_tokens", "max_position_embeddings").
const char* greedy_stop_reason(const ModelConfig& config, std::int64_t prompt_tokens,
                               std::span<const std::int32_t> generated, std::int64_t max_new_tokens,
                               bool stop_at_eos);

}  // namespace kvcheck
