#include "optimized/spvllm_policy.h"

#include <fmt/format.h>

#include "optimized/eviction_policies.h"
#include "optimized/policy_registry.h"

namespace kvcheck {
namespace {

class SpvLlmPolicy final : public KvPolicy {
 public:
  SpvLlmPolicy(std::int64_t budget, double recent, SlotStrategy strategy)
      : h2o_(make_h2o_policy(budget, recent)), budget_(budget), recent_(recent), strategy_(strategy) {}
  std::string name() const override {
    return fmt::format("spvllm:budget={},recent={},strategy={}", budget_, recent_, slot_strategy_name(strategy_));
  }
  std::string description() const override {
    return fmt::format("SpvLLM: H2O's eviction with the {} slot strategy, fp16", slot_strategy_name(strategy_));
  }
  std::vector<KvTier> tiers() const override { return h2o_->tiers(); }
  bool evicts() const override { return true; }
  SlotStrategy slot_strategy() const override { return strategy_; }
  std::vector<std::int32_t> select_prompt(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    return h2o_->select_prompt(layer, n, s);
  }
  bool accumulates_scores() const override { return h2o_->accumulates_scores(); }
  std::optional<std::size_t> select_victim(std::int32_t layer, std::span<const LiveToken> live,
                                           std::int32_t p) const override {
    return h2o_->select_victim(layer, live, p);
  }

 private:
  std::unique_ptr<KvPolicy> h2o_;
  std::int64_t budget_;
  double recent_;
  SlotStrategy strategy_;
};

}  // namespace

std::unique_ptr<KvPolicy> make_spvllm_policy(std::int64_t budget, double recent, SlotStrategy strategy) {
  return std::make_unique<SpvLlmPolicy>(budget, recent, strategy);
}


PolicyEntry spvllm_policy_entry() {
  std::vector<std::string> strategies;
  for (const SlotStrategy st : kAllSlotStrategies) strategies.push_back(slot_strategy_name(st));
  return {"spvllm", "SpvLLM: H2O's eviction with one of SpvLLM's four slot strategies, fp16",
          {{"budget", 64, 1, kMaxPolicyTokens, true, "tokens per head"},
           {"recent", 0.5, 0, 1, false, "share of the budget for the most recent positions (at least one)"},
           {"strategy", 3, 0, 3, true, "what happens to an evicted slot: no-op, free-block, sparse-copy, slot-reuse",
            false, strategies}},
          [](const PolicyParams& p) {
            return make_spvllm_policy(p.integer("budget"), p["recent"],
                                      kAllSlotStrategies[static_cast<std::size_t>(p.integer("strategy"))]);
          },
          [](std::int64_t b) { return fmt::format("spvllm:budget={}", std::max<std::int64_t>(1, b)); }};
}

}  // namespace kvcheck
