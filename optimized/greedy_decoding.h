// The greedy decoding rules the engine shares between single-request generation
// (optimized/engine.h) and the scheduler, written once so they cannot drift apart; they are the
// reference's rules (reference/generate.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <span>

#include "reference/config.h"

namespace kvcheck {

// Index of the largest logit, the lowest among ties. InputError naming the request and position
// when a logit is NaN.
std::int32_t greedy_token(std::int64_t request, std::span<const float> logits, std::int64_t position);

// Why a sequence stopped. The first three are the decoding rules' (greedy_stop); a scheduler
// adds kCancelled and kError.
enum class StopReason { kEos, kMaxNewTokens, kMaxPositionEmbeddings, kCancelled, kError };
// The name results carry and the CLI and JSON print: "eos", "max_new_tokens",
// "max_position_embeddings", "cancelled", "error".
const char* stop_reason_name(StopReason reason);
// The name, for test failure messages and streams.
std::ostream& operator<<(std::ostream& out, StopReason reason);

// Why generation stops after `generated`, or nullopt to go on. EOS first (when stop_at_eos and
// the last generated token is one of the config's eos ids), then the token budget, then the
// context.
std::optional<StopReason> greedy_stop(const ModelConfig& config, std::int64_t prompt_tokens,
                                      std::span<const std::int32_t> generated, std::int64_t max_new_tokens,
                                      bool stop_at_eos);

}  // namespace kvcheck
