#include "optimized/kivi_policy.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "optimized/eviction_policies.h"
#include "optimized/policy_registry.h"
#include "optimized/rotated_policy.h"

namespace kvcheck {
namespace {

class ResidualPolicy : public KvPolicy {
 public:
  explicit ResidualPolicy(const KiviParams& p) : p_(p) {}
  std::vector<KvTier> tiers() const override {
    const KvFormat values = p_.value_group > 0 ? int_format(per_token_group(p_.bits, static_cast<int>(p_.value_group)))
                                               : int_format(per_token(p_.bits));
    return {KvTier{fp16_format(), fp16_format()},
            KvTier{int_format(per_channel(p_.bits, static_cast<int>(p_.group))), values}};
  }
  std::int64_t residual_tokens() const override { return p_.residual; }
  StepDecision decide_step(std::int32_t, std::span<const LiveToken> live, std::int32_t) const override {
    const auto residual = std::count_if(live.begin(), live.end(), [](const LiveToken& t) { return t.tier == 0; });
    StepDecision d;
    d.flush = residual >= p_.residual;
    return d;
  }

 protected:
  // The kept positions (ascending) split: whole groups quantized, the rest in the residual.
  PromptSelection split(std::vector<std::int32_t> kept) const {
    const auto quantized = static_cast<std::ptrdiff_t>(static_cast<std::int64_t>(kept.size()) / p_.group * p_.group);
    PromptSelection s;
    s.low.assign(kept.begin(), kept.begin() + quantized);
    s.high.assign(kept.begin() + quantized, kept.end());
    return s;
  }
  std::string quant_description() const {
    return fmt::format("keys int{} per channel over {} tokens, values int{} {}, fp16 residual of {} tokens", p_.bits,
                       p_.group, p_.bits,
                       p_.value_group > 0 ? fmt::format("per {} channels", p_.value_group) : std::string("per token"),
                       p_.residual);
  }
  KiviParams p_;
};

class KiviPolicy final : public ResidualPolicy {
 public:
  using ResidualPolicy::ResidualPolicy;
  std::string name() const override {
    return fmt::format("kivi{}:group={},residual={}", p_.bits, p_.group, p_.residual);
  }
  std::string description() const override { return "KIVI: every token kept; " + quant_description(); }
  PromptSelection select_prompt_tiers(std::int32_t, std::int64_t n, const PromptScores&) const override {
    std::vector<std::int32_t> all(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
    return split(std::move(all));
  }
};

class MiniKvPolicy final : public ResidualPolicy {
 public:
  MiniKvPolicy(const KiviParams& q, const MiniKvParams& s) : ResidualPolicy(q), s_(s) {}
  std::string name() const override {
    return fmt::format("minikv:budget={},recent={},pyramid={},group={},value_group={},residual={}", s_.budget,
                       s_.recent, s_.pyramid, p_.group, p_.value_group, p_.residual);
  }
  std::string description() const override {
    return "MiniKV: heavy hitters and a recent window chosen once at prefill; " + quant_description();
  }
  bool evicts() const override { return true; }
  PromptSelection select_prompt_tiers(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    std::int64_t budget = s_.budget;
    if (s_.pyramid > 1.0) {
      const auto recent = std::max<std::int64_t>(1, std::llround(static_cast<double>(s_.budget) * s_.recent));
      budget = pyramid_budgets(s_.budget, s_.pyramid, recent, s.num_layers, n)[static_cast<std::size_t>(layer)];
    }
    return split(minikv_select(s.all, n, budget, s_.recent));
  }

 private:
  MiniKvParams s_;
};

// KIVI's quantization parameters of a spec (kivi2, kivi4, minikv).
KiviParams kivi_params(const PolicyParams& p, int bits) {
  const std::int64_t g = p.integer("group");
  p.require(g == 16 || g == 32 || g == 128, "group must be 16, 32 or 128");
  p.require(p.integer("residual") % g == 0, fmt::format("residual must be a multiple of group ({})", g));
  KiviParams k;
  k.bits = bits;
  k.group = g;
  k.residual = p.integer("residual");
  return k;
}

}  // namespace

std::vector<std::int32_t> minikv_select(std::span<const float> scores, std::int64_t n, std::int64_t budget,
                                        double recent) {
  std::vector<std::int32_t> kept;
  if (n <= budget) {
    for (std::int64_t i = 0; i < n; ++i) kept.push_back(static_cast<std::int32_t>(i));
    return kept;
  }
  const std::int64_t window =
      std::clamp<std::int64_t>(std::llround(static_cast<double>(budget) * recent), 1, budget);
  kept = top_positions(scores, n - window, budget - window);
  for (std::int64_t i = n - window; i < n; ++i) kept.push_back(static_cast<std::int32_t>(i));
  return kept;
}

std::unique_ptr<KvPolicy> make_kivi_policy(const KiviParams& params) { return std::make_unique<KiviPolicy>(params); }

std::unique_ptr<KvPolicy> make_minikv_policy(const KiviParams& quant, const MiniKvParams& selection) {
  return std::make_unique<MiniKvPolicy>(quant, selection);
}


PolicyEntry kivi_policy_entry(int bits) {
  return {fmt::format("kivi{}", bits),
          fmt::format("KIVI: every token kept, keys int{0} per channel over groups of tokens, values int{0} "
                      "per token, behind an fp16 residual", bits),
          with_rotation_params(
              {{"group", 32, 16, 128, true, "G: tokens per key channel group (16, 32, 128)"},
               {"residual", 128, 16, kMaxPolicyTokens, true, "n_r: fp16 residual flushed when full (a multiple of G)"}}),
          [=](const PolicyParams& p) { return rotated_from_params(make_kivi_policy(kivi_params(p, bits)), p); }};
}

PolicyEntry minikv_policy_entry() {
  return {"minikv",
          "MiniKV: heavy hitters and a recent window chosen once at prefill, 2-bit KIVI (groups of 16) behind "
          "an fp16 residual",
          {{"budget", 64, 2, kMaxPolicyTokens, true, "mean prompt tokens kept per head"},
           {"recent", 0.5, 0, 1, false, "share of the budget for the most recent positions (at least one)"},
           {"pyramid", 1, 1, 1000, false, "1: uniform layer budgets; > 1: PyramidKV's, the last layer gets "
                                          "budget / pyramid"},
           {"group", 16, 16, 128, true, "G: tokens per key channel group (16, 32, 128)"},
           {"value_group", 16, 1, 1024, true, "g: channels per value group (must divide head_dim)"},
           {"residual", 128, 16, kMaxPolicyTokens, true, "n_r: fp16 residual flushed when full (a multiple of G)"}},
          [](const PolicyParams& p) {
            KiviParams q = kivi_params(p, 2);
            q.value_group = p.integer("value_group");
            MiniKvParams m;
            m.budget = p.integer("budget");
            m.recent = p["recent"];
            m.pyramid = p["pyramid"];
            return make_minikv_policy(q, m);
          },
          [](std::int64_t b) { return fmt::format("minikv:budget={}", std::max<std::int64_t>(2, b)); }};
}

}  // namespace kvcheck
