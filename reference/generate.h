// Greedy generation with the reference model.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reference/matrix.h"
#include "reference/model.h"

namespace kvcheck {

enum class DecodePath {
  kKVCache,        // prefill once, then one position per step over a contiguous KV cache
  kFullRecompute,  // every step recomputes the whole sequence from scratch
};

struct GenerateOptions {
  std::int64_t max_new_tokens = 16;
  DecodePath path = DecodePath::kKVCache;
  bool stop_at_eos = true;    // stop after emitting one of the config's eos_token_ids
  bool keep_logits = false;   // fill GenerateResult::logits
};

struct GenerateResult {
  std::vector<std::int32_t> generated;  // new tokens, in order
  // When keep_logits: [prompt + generated, vocab]; row i holds the logits computed at position
  // i (row i predicts token i + 1; the last row is the prediction after the last token).
  MatrixRM logits;
  std::string stop_reason;  // "max_new_tokens", "eos" or "max_position_embeddings"
};

// Index of the largest logit; the lowest index among ties. InputError if any logit is NaN.
std::int32_t argmax_token(std::span<const float> logits, std::int64_t position);

// Greedy decoding. The prompt is checked first (non-empty, ids in range, not longer than
// max_position_embeddings: InputError naming "prompt"). Generation stops at max_new_tokens,
// at EOS, or when the sequence reaches max_position_embeddings.
GenerateResult generate_greedy(const ReferenceModel& model, std::span<const std::int32_t> prompt,
                               const GenerateOptions& options);

}  // namespace kvcheck
