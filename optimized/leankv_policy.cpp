#include "optimized/leankv_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "optimized/policy_registry.h"
#include "optimized/rotated_policy.h"

namespace kvcheck {

double leankv_significance(const LiveToken& t, std::int32_t new_position) {
  const double seen = static_cast<double>(new_position) - static_cast<double>(t.position);
  return seen > 0 ? static_cast<double>(t.score) / seen : 0.0;
}

namespace {

KvFormat bits_format(int bits) { return bits == 16 ? fp16_format() : int_format(per_token(bits)); }

std::string tier_label(int k, int v) { return fmt::format("K{}V{}", k, v); }

class LeanKvPolicy final : public KvPolicy {
 public:
  explicit LeanKvPolicy(const LeanKvParams& p) : p_(p) {}
  std::string name() const override {
    if (p_.is_static()) {
      return fmt::format("leankv:static_high={},static_low={},window={},high_k={},high_v={},low_k={},low_v={}",
                         p_.static_high, p_.static_low, p_.window, p_.high_k, p_.high_v, p_.low_k, p_.low_v);
    }
    return fmt::format("leankv:alpha_h={},alpha_l={},window={},high_k={},high_v={},low_k={},low_v={}", p_.alpha_h,
                       p_.alpha_l, p_.window, p_.high_k, p_.high_v, p_.low_k, p_.low_v);
  }
  std::string description() const override {
    if (p_.is_static()) {
      return fmt::format("LeanKV static budgets: every head keeps the recent {} and the {} most significant other "
                         "tokens at {}, the next {} at {}",
                         p_.window, p_.static_high, tier_label(p_.high_k, p_.high_v), p_.static_low,
                         tier_label(p_.low_k, p_.low_v));
    }
    return fmt::format("LeanKV: {} / {} / pruned by significance (alpha_h {}, alpha_l {}), recent {} at high",
                       tier_label(p_.high_k, p_.high_v), tier_label(p_.low_k, p_.low_v), p_.alpha_h, p_.alpha_l,
                       p_.window);
  }
  std::vector<KvTier> tiers() const override {
    return {KvTier{bits_format(p_.high_k), bits_format(p_.high_v)}, KvTier{bits_format(p_.low_k), bits_format(p_.low_v)}};
  }
  bool evicts() const override { return true; }
  bool accumulates_scores() const override { return true; }

  const LeanKvParams& params() const { return p_; }

  PromptSelection select_prompt_tiers(std::int32_t, std::int64_t n, const PromptScores& s) const override {
    if (p_.is_static()) return select_static(n, s);
    PromptSelection out;
    for (std::int64_t j = 0; j < n; ++j) {
      const auto pos = static_cast<std::int32_t>(j);
      if (j >= n - p_.window) {
        out.high.push_back(pos);
        continue;
      }
      const double sig = static_cast<double>(s.all[static_cast<std::size_t>(j)]) / static_cast<double>(n - j);
      const double i = static_cast<double>(j + 1);
      if (sig >= p_.alpha_h / i) {
        out.high.push_back(pos);
      } else if (sig >= p_.alpha_l / i) {
        out.low.push_back(pos);
      }
    }
    return out;
  }
  std::vector<std::int32_t> select_prompt(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    PromptSelection t = select_prompt_tiers(layer, n, s);
    t.high.insert(t.high.end(), t.low.begin(), t.low.end());
    std::sort(t.high.begin(), t.high.end());
    return t.high;
  }

  StepDecision decide_step(std::int32_t, std::span<const LiveToken> live, std::int32_t p) const override {
    if (p_.is_static()) return decide_static(live, p);
    StepDecision d;
    const std::int64_t c_pos = static_cast<std::int64_t>(p) - p_.window;
    if (c_pos < 0) return d;
    const double n = static_cast<double>(p) + 1.0;
    const double high = p_.alpha_h / n, low = p_.alpha_l / n;
    std::optional<std::size_t> c;
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].position == c_pos) c = i;
    }
    // The candidate was dropped at prefill (only tokens outside the window can be), or is low.
    if (!c || live[*c].tier != 0) return d;
    // The least significant token of a tier, outside the recent window, other than `skip`.
    auto least = [&](int tier, std::optional<std::size_t> skip) {
      std::optional<std::size_t> v;
      for (std::size_t i = 0; i < live.size(); ++i) {
        if (live[i].tier != tier || live[i].position > c_pos || (skip && i == *skip)) continue;
        const double s = leankv_significance(live[i], p);
        if (!v) {
          v = i;
          continue;
        }
        const double sv = leankv_significance(live[*v], p);
        if (s < sv || (s == sv && live[i].position < live[*v].position)) v = i;
      }
      return v;
    };
    const double sig_c = leankv_significance(live[*c], p);
    if (sig_c >= high) {
      const std::optional<std::size_t> v = least(0, std::nullopt);
      if (!v) return d;
      const double sv = leankv_significance(live[*v], p);
      if (sv >= high) return d;
      if (sv >= low) {
        d.demote = v;
      } else {
        d.evict = v;
      }
    } else if (sig_c >= low) {
      d.demote = c;
      const std::optional<std::size_t> v = least(1, std::nullopt);
      if (v && leankv_significance(live[*v], p) < low) d.evict = v;
    } else {
      d.evict = c;
    }
    return d;
  }

 private:
  PromptSelection select_static(std::int64_t n, const PromptScores& s) const {
    const std::int64_t outside = std::max<std::int64_t>(0, n - p_.window);
    std::vector<std::pair<double, std::int32_t>> ranked;  // (significance x i, position)
    for (std::int64_t j = 0; j < outside; ++j) {
      const double sig = static_cast<double>(s.all[static_cast<std::size_t>(j)]) / static_cast<double>(n - j);
      ranked.emplace_back(sig * static_cast<double>(j + 1), static_cast<std::int32_t>(j));
    }
    std::sort(ranked.begin(), ranked.end(), std::greater<>());  // larger first, ties to the newer
    PromptSelection out;
    for (std::size_t r = 0; r < ranked.size(); ++r) {
      if (static_cast<std::int64_t>(r) < p_.static_high) {
        out.high.push_back(ranked[r].second);
      } else if (static_cast<std::int64_t>(r) < p_.static_high + p_.static_low) {
        out.low.push_back(ranked[r].second);
      }
    }
    for (std::int64_t j = outside; j < n; ++j) out.high.push_back(static_cast<std::int32_t>(j));
    std::sort(out.high.begin(), out.high.end());
    std::sort(out.low.begin(), out.low.end());
    return out;
  }

  StepDecision decide_static(std::span<const LiveToken> live, std::int32_t p) const {
    StepDecision d;
    const std::int64_t c_pos = static_cast<std::int64_t>(p) - p_.window;
    if (c_pos < 0) return d;
    std::int64_t high = 0, low = 0;
    std::optional<std::size_t> v, w;  // the least significant high token outside the window, and low token
    auto less = [&](std::size_t a, std::size_t b) {
      const double sa = leankv_significance(live[a], p), sb = leankv_significance(live[b], p);
      return sa < sb || (sa == sb && live[a].position < live[b].position);
    };
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].position > c_pos) continue;
      std::optional<std::size_t>& least = live[i].tier == 0 ? v : w;
      ++(live[i].tier == 0 ? high : low);
      if (!least || less(i, *least)) least = i;
    }
    if (high <= p_.static_high) return d;
    if (low < p_.static_low) {
      d.demote = v;
    } else if (!w || less(*v, *w)) {
      d.evict = v;
    } else {
      d.demote = v;
      d.evict = w;
    }
    return d;
  }

  LeanKvParams p_;
};

}  // namespace

std::unique_ptr<KvPolicy> make_leankv_policy(const LeanKvParams& params) {
  return std::make_unique<LeanKvPolicy>(params);
}

std::optional<LeanKvParams> leankv_params_of(const KvPolicy& policy) {
  const auto* p = dynamic_cast<const LeanKvPolicy*>(&policy);
  return p ? std::optional<LeanKvParams>(p->params()) : std::nullopt;
}

std::pair<std::int64_t, std::int64_t> leankv_static_counts(const LeanKvParams& params, std::int64_t last) {
  const std::int64_t context = last + 1;
  const std::int64_t outside = std::max<std::int64_t>(0, context - params.window);
  const std::int64_t high = std::min(params.static_high, outside);
  return {std::min(params.window, context) + high, std::min(params.static_low, outside - high)};
}


PolicyEntry leankv_policy_entry() {
  auto bits = [](const char* key, double value, const char* help) {
    return PolicyParam{key, value, 2, 16, true, help};
  };
  return {"leankv",
          "LeanKV: high / low precision tiers and pruning by attention significance, Algorithm 1 while decoding",
          with_rotation_params({{"alpha_h", 1.0, 0, 1e6, false, "high tier at significance >= alpha_h / N"},
           {"alpha_l", 0.02, 0, 1e6, false, "low tier at significance >= alpha_l / N, else pruned"},
           {"window", 64, 1, kMaxPolicyTokens, true, "recent positions always at high"},
           bits("high_k", 8, "high tier key bits (2, 4, 8; 16: fp16)"),
           bits("high_v", 4, "high tier value bits"),
           bits("low_k", 4, "low tier key bits"),
           bits("low_v", 2, "low tier value bits"),
           {"static_high", -1, -1, kMaxPolicyTokens, true,
            "static mode when >= 0 (with static_low; alphas unused): every head keeps the window plus this "
            "many of its most significant other tokens at high"},
           {"static_low", -1, -1, kMaxPolicyTokens, true, "static mode: the next this many at low"}}),
          [](const PolicyParams& p) {
            for (const char* key : {"high_k", "high_v", "low_k", "low_v"}) {
              const std::int64_t b = p.integer(key);
              p.require(b == 2 || b == 4 || b == 8 || b == 16, fmt::format("{} must be 2, 4, 8 or 16", key));
            }
            p.require(p["alpha_l"] <= p["alpha_h"], "alpha_l must not exceed alpha_h");
            p.require((p.integer("static_high") < 0) == (p.integer("static_low") < 0),
                      "static_high and static_low are set together (both -1: the dynamic mode)");
            LeanKvParams lp;
            lp.alpha_h = p["alpha_h"];
            lp.alpha_l = p["alpha_l"];
            lp.window = p.integer("window");
            lp.high_k = static_cast<int>(p.integer("high_k"));
            lp.high_v = static_cast<int>(p.integer("high_v"));
            lp.low_k = static_cast<int>(p.integer("low_k"));
            lp.low_v = static_cast<int>(p.integer("low_v"));
            lp.static_high = p.integer("static_high");
            lp.static_low = p.integer("static_low");
            return rotated_from_params(make_leankv_policy(lp), p);
          }};
}

}  // namespace kvcheck
