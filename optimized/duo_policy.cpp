#include "optimized/duo_policy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <stdexcept>

#include "optimized/policy_registry.h"
#include "reference/errors.h"

namespace kvcheck {

std::int64_t duo_default_retrieval_heads(double retrieval, std::int64_t heads) {
  return std::min(heads, static_cast<std::int64_t>(std::ceil(retrieval * static_cast<double>(heads) - 1e-9)));
}

bool duo_is_retrieval(const DuoParams& p, std::int64_t layer, std::int64_t head, std::int64_t layers,
                      std::int64_t kv_heads) {
  const std::int64_t flat = layer * kv_heads + head;
  if (p.heads.empty()) return flat < duo_default_retrieval_heads(p.retrieval, layers * kv_heads);
  return std::find(p.heads.begin(), p.heads.end(), flat) != p.heads.end();
}

namespace {

class DuoPolicy final : public KvPolicy {
 public:
  explicit DuoPolicy(DuoParams p) : p_(std::move(p)) {}
  std::string name() const override {
    return p_.heads.empty()
               ? fmt::format("duo:retrieval={},sinks={},recent={}", p_.retrieval, p_.sinks, p_.recent)
               : fmt::format("duo:sinks={},recent={},heads={}", p_.sinks, p_.recent, fmt::join(p_.heads, "/"));
  }
  std::string description() const override {
    const std::string which = p_.heads.empty()
                                  ? fmt::format("the first {} of the kv heads (uncalibrated)", p_.retrieval)
                                  : fmt::format("kv heads {} (calibrated)", fmt::join(p_.heads, "/"));
    return fmt::format("DuoAttention: retrieval heads ({}) keep every token, the others {} sinks and the {} most "
                       "recent, fp16",
                       which, p_.sinks, p_.recent);
  }
  std::vector<KvTier> tiers() const override { return {KvTier{fp16_format(), fp16_format()}}; }
  bool evicts() const override { return true; }
  const DuoParams& params() const { return p_; }

  void bind_engine(std::int64_t layers, std::int64_t kv_heads, std::int64_t, std::int64_t) override {
    for (std::int64_t h : p_.heads) {
      if (h >= layers * kv_heads) {
        throw InputError(fmt::format("policy 'duo': parameter 'heads' names kv head {}, the model has {} ({} layers x "
                                     "{} kv heads, numbered layer * {} + head)",
                                     h, layers * kv_heads, layers, kv_heads, kv_heads));
      }
    }
    layers_ = layers;
    kv_heads_ = kv_heads;
  }

  std::vector<PromptSelection> select_prompt_all(std::int64_t n, std::int64_t kv_heads,
                                                 std::span<const PromptScores> heads) const override {
    const std::int64_t layers = static_cast<std::int64_t>(heads.size()) / kv_heads;
    std::vector<PromptSelection> out(heads.size());
    for (std::size_t i = 0; i < heads.size(); ++i) {
      const std::int64_t layer = static_cast<std::int64_t>(i) / kv_heads, head = static_cast<std::int64_t>(i) % kv_heads;
      std::vector<std::int32_t>& kept = out[i].high;
      for (std::int64_t j = 0; j < n; ++j) {
        if (duo_is_retrieval(p_, layer, head, layers, kv_heads) || n <= p_.sinks + p_.recent || j < p_.sinks ||
            j >= n - p_.recent) {
          kept.push_back(static_cast<std::int32_t>(j));
        }
      }
    }
    return out;
  }

  StepDecision decide_step(std::int32_t, std::span<const LiveToken>, std::int32_t) const override {
    throw std::logic_error("duo policy: a decode decision depends on the head (decide_head_step)");
  }
  StepDecision decide_head_step(std::int32_t layer, std::int32_t kv_head, std::span<const LiveToken> live,
                                std::int32_t) const override {
    if (kv_heads_ == 0) throw std::logic_error("duo policy: decide_head_step before bind_engine");
    if (duo_is_retrieval(p_, layer, kv_head, layers_, kv_heads_)) return {};
    if (static_cast<std::int64_t>(live.size()) < p_.sinks + p_.recent) return {};
    std::optional<std::size_t> oldest;
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].position < p_.sinks) continue;
      if (!oldest || live[i].position < live[*oldest].position) oldest = i;
    }
    return {oldest, std::nullopt};
  }

 private:
  DuoParams p_;
  std::int64_t layers_ = 0, kv_heads_ = 0;
};

}  // namespace

std::unique_ptr<KvPolicy> make_duo_policy(const DuoParams& params) { return std::make_unique<DuoPolicy>(params); }

std::optional<DuoParams> duo_params_of(const KvPolicy& policy) {
  const auto* d = dynamic_cast<const DuoPolicy*>(&policy);
  return d ? std::optional<DuoParams>(d->params()) : std::nullopt;
}

PolicyEntry duo_policy_entry() {
  return {"duo", "DuoAttention: retrieval heads keep every token, streaming heads sinks plus a recent window, fp16",
          {{"retrieval", 0.25, 0, 1, false,
            "share of the kv heads that keep every token; without heads: the first ones (uncalibrated)"},
           {"sinks", 4, 0, kMaxPolicyTokens, true, "streaming heads: first positions kept"},
           {"recent", 60, 1, kMaxPolicyTokens, true, "streaming heads: most recent positions kept"},
           {"heads", 0, 0, kMaxPolicyTokens, true,
            "if set: the retrieval heads, numbered layer * kv_heads + head, e.g. 1/4/6 (verify --duo-calibrate "
            "computes them); replaces retrieval",
            true}},
          [](const PolicyParams& p) {
            DuoParams d;
            d.retrieval = p["retrieval"];
            d.sinks = p.integer("sinks");
            d.recent = p.integer("recent");
            d.heads = p.integers("heads");
            std::sort(d.heads.begin(), d.heads.end());
            p.require(std::adjacent_find(d.heads.begin(), d.heads.end()) == d.heads.end(),
                      "parameter 'heads' names a kv head twice");
            return make_duo_policy(d);
          },
          [](std::int64_t b) {
            const std::int64_t sinks = std::min<std::int64_t>(4, b / 2);
            return fmt::format("duo:sinks={},recent={}", sinks, std::max<std::int64_t>(1, b - sinks));
          }};
}

}  // namespace kvcheck
