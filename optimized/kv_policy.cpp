#include "optimized/kv_policy.h"

#include <numeric>

#include "kernels/cpu/hadamard_rotate.h"

namespace kvcheck {

std::vector<std::int32_t> KvPolicy::select_prompt(std::int32_t, std::int64_t prompt_len, const PromptScores&) const {
  std::vector<std::int32_t> all(static_cast<std::size_t>(prompt_len));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

bool KvPolicy::prefix_closed() const {
  if (!swappable()) return false;
  const auto own_rows = [&](const KvFormat& f) {
    switch (f.dtype) {
      case KvDType::kFp32:
      case KvDType::kFp16: return true;
      case KvDType::kFp8E4M3: return fp8_scale() == Fp8Scale::kCalibrated;
      case KvDType::kInt: return f.spec.token_group() == 1;
    }
    return false;
  };
  const KvTier tier = tiers().front();
  return own_rows(tier.key) && own_rows(tier.value);
}

void KvPolicy::rotate(RotatedPart part, std::span<float> rows, std::int64_t head_dim) const {
  rotate_rows(rotation(), part, rows, head_dim);
}

void rotate_rows(const KvRotation& r, RotatedPart part, std::span<float> rows, std::int64_t head_dim) {
  if (!r.hadamard) return;
  const std::vector<float> signs = r.signs ? hadamard_signs(r.seed, head_dim) : std::vector<float>{};
  if (part == RotatedPart::kOutput) {
    hadamard_unrotate(rows, head_dim, signs);
  } else {
    hadamard_rotate(rows, head_dim, signs);
  }
}

std::optional<std::size_t> KvPolicy::select_victim(std::int32_t, std::span<const LiveToken>, std::int32_t) const {
  return std::nullopt;
}

PromptSelection KvPolicy::select_prompt_tiers(std::int32_t layer, std::int64_t prompt_len,
                                              const PromptScores& scores) const {
  return {select_prompt(layer, prompt_len, scores), {}};
}

std::vector<PromptSelection> KvPolicy::select_prompt_all(std::int64_t prompt_len, std::int64_t kv_heads,
                                                         std::span<const PromptScores> heads) const {
  std::vector<PromptSelection> out;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    out.push_back(select_prompt_tiers(static_cast<std::int32_t>(static_cast<std::int64_t>(i) / kv_heads), prompt_len,
                                      heads[i]));
  }
  return out;
}

std::vector<std::size_t> KvPolicy::select_pages(std::span<const float>, std::int64_t, std::int64_t head_dim,
                                                std::span<const float> key_min, std::span<const float>,
                                                std::size_t) const {
  std::vector<std::size_t> all(key_min.size() / static_cast<std::size_t>(head_dim));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

StepDecision KvPolicy::decide_step(std::int32_t layer, std::span<const LiveToken> live,
                                   std::int32_t new_position) const {
  return {select_victim(layer, live, new_position), std::nullopt};
}

StepDecision KvPolicy::decide_head_step(std::int32_t layer, std::int32_t, std::span<const LiveToken> live,
                                        std::int32_t new_position) const {
  return decide_step(layer, live, new_position);
}

}  // namespace kvcheck
