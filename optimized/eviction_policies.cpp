#include "optimized/eviction_policies.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "optimized/policy_registry.h"

namespace kvcheck {

std::vector<std::int32_t> top_positions(std::span<const float> scores, std::int64_t candidates, std::int64_t count) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(candidates));
  std::iota(order.begin(), order.end(), 0);
  count = std::clamp<std::int64_t>(count, 0, candidates);
  std::partial_sort(order.begin(), order.begin() + count, order.end(), [&](std::int32_t a, std::int32_t b) {
    const float sa = scores[static_cast<std::size_t>(a)];
    const float sb = scores[static_cast<std::size_t>(b)];
    return sa != sb ? sa > sb : a < b;
  });
  order.resize(static_cast<std::size_t>(count));
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<float> max_pool(std::span<const float> scores, std::int64_t pool) {
  const std::int64_t n = static_cast<std::int64_t>(scores.size());
  const std::int64_t half = pool / 2;
  std::vector<float> out(scores.size());
  for (std::int64_t i = 0; i < n; ++i) {
    float m = scores[static_cast<std::size_t>(i)];
    for (std::int64_t j = std::max<std::int64_t>(0, i - half); j <= std::min(n - 1, i + half); ++j) {
      m = std::max(m, scores[static_cast<std::size_t>(j)]);
    }
    out[static_cast<std::size_t>(i)] = m;
  }
  return out;
}

std::vector<std::int64_t> pyramid_budgets(std::int64_t mean, double ratio, std::int64_t window, std::int32_t layers,
                                          std::int64_t prompt) {
  const auto n_layers = static_cast<std::size_t>(std::max<std::int32_t>(layers, 1));
  if (prompt <= mean) return std::vector<std::int64_t>(n_layers, prompt);
  if (layers <= 1) return {mean};
  std::int64_t top = std::max<std::int64_t>(window + 1, std::llround(static_cast<double>(mean) / ratio));
  std::int64_t bottom = 2 * mean - top;
  if (bottom > prompt) {
    // The first layer cannot hold more than the prompt. Without this, a prompt a little longer
    // than the mean would be cut hard in the deep layers while the first layers' budgets went
    // unused (PyramidKV's released code caps it the same way).
    bottom = prompt;
    top = 2 * mean - prompt;
  }
  std::vector<std::int64_t> b;
  for (std::int32_t l = 0; l < layers; ++l) {
    const double t = static_cast<double>(l) / static_cast<double>(layers - 1);
    const std::int64_t at = std::llround(static_cast<double>(bottom) - t * static_cast<double>(bottom - top));
    b.push_back(std::min(prompt, std::max<std::int64_t>(window + 1, at)));
  }
  return b;
}

namespace {

std::vector<std::int32_t> all_positions(std::int64_t n) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

// Positions [from, to) appended to `kept`.
void append_range(std::vector<std::int32_t>& kept, std::int64_t from, std::int64_t to) {
  for (std::int64_t p = from; p < to; ++p) kept.push_back(static_cast<std::int32_t>(p));
}

class EvictionPolicy : public KvPolicy {
 public:
  std::vector<KvTier> tiers() const override { return {KvTier{fp16_format(), fp16_format()}}; }
  bool evicts() const override { return true; }
};

class StreamingPolicy final : public EvictionPolicy {
 public:
  StreamingPolicy(std::int64_t sinks, std::int64_t window) : sinks_(sinks), window_(window) {}
  std::string name() const override { return fmt::format("streaming:sinks={},window={}", sinks_, window_); }
  std::string description() const override {
    return fmt::format("StreamingLLM: the first {} positions and the {} most recent, fp16", sinks_, window_);
  }
  std::vector<std::int32_t> select_prompt(std::int32_t, std::int64_t n, const PromptScores&) const override {
    if (n <= sinks_ + window_) return all_positions(n);
    std::vector<std::int32_t> kept;
    append_range(kept, 0, sinks_);
    append_range(kept, n - window_, n);
    return kept;
  }
  std::optional<std::size_t> select_victim(std::int32_t, std::span<const LiveToken> live,
                                           std::int32_t) const override {
    if (static_cast<std::int64_t>(live.size()) < sinks_ + window_) return std::nullopt;
    std::optional<std::size_t> oldest;
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].position < sinks_) continue;
      if (!oldest || live[i].position < live[*oldest].position) oldest = i;
    }
    return oldest;
  }

 private:
  std::int64_t sinks_, window_;
};

class H2oPolicy final : public EvictionPolicy {
 public:
  H2oPolicy(std::int64_t budget, double recent)
      : budget_(budget), recent_share_(recent),
        recent_(std::clamp<std::int64_t>(std::llround(static_cast<double>(budget) * recent), 1, budget)) {}
  std::string name() const override { return fmt::format("h2o:budget={},recent={}", budget_, recent_share_); }
  std::string description() const override {
    return fmt::format("H2O: {} tokens per head, {} most recent plus heavy hitters by accumulated attention, fp16",
                       budget_, recent_);
  }
  bool accumulates_scores() const override { return true; }
  std::vector<std::int32_t> select_prompt(std::int32_t, std::int64_t n, const PromptScores& s) const override {
    if (n <= budget_) return all_positions(n);
    std::vector<std::int32_t> kept = top_positions(s.all, n - recent_, budget_ - recent_);
    append_range(kept, n - recent_, n);
    return kept;
  }
  std::optional<std::size_t> select_victim(std::int32_t, std::span<const LiveToken> live,
                                           std::int32_t new_position) const override {
    if (static_cast<std::int64_t>(live.size()) < budget_) return std::nullopt;
    // The recent window: the `recent_` latest positions, the one being added included.
    const std::int64_t protected_from = static_cast<std::int64_t>(new_position) - recent_ + 1;
    std::optional<std::size_t> victim;
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].position >= protected_from) continue;
      if (!victim || live[i].score < live[*victim].score ||
          (live[i].score == live[*victim].score && live[i].position < live[*victim].position)) {
        victim = i;
      }
    }
    return victim;
  }

 private:
  std::int64_t budget_;
  double recent_share_;
  std::int64_t recent_;
};

// SnapKV's vote: the last `window` positions, plus the top `budget - window` older ones by the
// window's column sums, max-pooled.
std::vector<std::int32_t> snap_select(std::int64_t n, std::int64_t budget, std::int64_t window, std::int64_t pool,
                                      const PromptScores& s) {
  if (n <= budget) return all_positions(n);
  const std::vector<float> pooled = max_pool(s.window.first(static_cast<std::size_t>(n - window)), pool);
  std::vector<std::int32_t> kept = top_positions(pooled, n - window, budget - window);
  append_range(kept, n - window, n);
  return kept;
}

class SnapKvPolicy final : public EvictionPolicy {
 public:
  SnapKvPolicy(std::int64_t budget, std::int64_t window, std::int64_t pool)
      : budget_(budget), window_(window), pool_(pool) {}
  std::string name() const override {
    return fmt::format("snapkv:budget={},window={},pool={}", budget_, window_, pool_);
  }
  std::string description() const override {
    return fmt::format("SnapKV: {} prompt tokens per head chosen once by the last {} queries (max-pool {}), "
                       "generated tokens all kept, fp16", budget_, window_, pool_);
  }
  std::int64_t observation_window() const override { return window_; }
  std::vector<std::int32_t> select_prompt(std::int32_t, std::int64_t n, const PromptScores& s) const override {
    return snap_select(n, budget_, window_, pool_, s);
  }

 private:
  std::int64_t budget_, window_, pool_;
};

class PyramidKvPolicy final : public EvictionPolicy {
 public:
  PyramidKvPolicy(std::int64_t budget, double ratio, std::int64_t window, std::int64_t pool)
      : budget_(budget), ratio_(ratio), window_(window), pool_(pool) {}
  std::string name() const override {
    return fmt::format("pyramidkv:budget={},ratio={},window={},pool={}", budget_, ratio_, window_, pool_);
  }
  std::string description() const override {
    return fmt::format("PyramidKV: SnapKV selection with prompt budgets falling linearly with depth around a mean of "
                       "{} (last layer budget / {}), generated tokens all kept, fp16", budget_, ratio_);
  }
  std::int64_t observation_window() const override { return window_; }
  std::vector<std::int32_t> select_prompt(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    const std::vector<std::int64_t> b = pyramid_budgets(budget_, ratio_, window_, s.num_layers, n);
    return snap_select(n, b.at(static_cast<std::size_t>(layer)), window_, pool_, s);
  }

 private:
  std::int64_t budget_;
  double ratio_;
  std::int64_t window_, pool_;
};

}  // namespace

std::unique_ptr<KvPolicy> make_streaming_policy(std::int64_t sinks, std::int64_t window) {
  return std::make_unique<StreamingPolicy>(sinks, window);
}
std::unique_ptr<KvPolicy> make_h2o_policy(std::int64_t budget, double recent) {
  return std::make_unique<H2oPolicy>(budget, recent);
}
std::unique_ptr<KvPolicy> make_snapkv_policy(std::int64_t budget, std::int64_t window, std::int64_t pool) {
  return std::make_unique<SnapKvPolicy>(budget, window, pool);
}
std::unique_ptr<KvPolicy> make_pyramidkv_policy(std::int64_t budget, double ratio, std::int64_t window,
                                                std::int64_t pool) {
  return std::make_unique<PyramidKvPolicy>(budget, ratio, window, pool);
}


PolicyEntry streaming_policy_entry() {
  return {"streaming", "StreamingLLM: attention sinks plus a recent window, fp16",
          {{"sinks", 4, 0, kMaxPolicyTokens, true, "first positions always kept"},
           {"window", 60, 1, kMaxPolicyTokens, true, "most recent positions kept"}},
          [](const PolicyParams& p) { return make_streaming_policy(p.integer("sinks"), p.integer("window")); },
          [](std::int64_t b) {
            const std::int64_t sinks = std::min<std::int64_t>(4, b / 2);
            return fmt::format("streaming:sinks={},window={}", sinks, std::max<std::int64_t>(1, b - sinks));
          }};
}

PolicyEntry h2o_policy_entry() {
  return {"h2o", "H2O: heavy hitters by accumulated attention plus a recent window, one eviction per step, fp16",
          {{"budget", 64, 1, kMaxPolicyTokens, true, "tokens per head"},
           {"recent", 0.5, 0, 1, false, "share of the budget for the most recent positions (at least one)"}},
          [](const PolicyParams& p) { return make_h2o_policy(p.integer("budget"), p["recent"]); },
          [](std::int64_t b) { return fmt::format("h2o:budget={}", std::max<std::int64_t>(1, b)); }};
}

PolicyEntry snapkv_policy_entry() {
  return {"snapkv", "SnapKV: prompt tokens chosen once by an observation window, generated tokens kept, fp16",
          {{"budget", 64, 2, kMaxPolicyTokens, true, "prompt tokens per head"},
           {"window", 32, 1, kMaxPolicyTokens, true, "observation window (last prompt queries), kept"},
           {"pool", 7, 1, 101, true, "max-pooling width (odd)"}},
          [](const PolicyParams& p) {
            p.require(p.integer("window") < p.integer("budget"), "window must be smaller than budget");
            p.require(p.integer("pool") % 2 == 1, "pool must be odd");
            return make_snapkv_policy(p.integer("budget"), p.integer("window"), p.integer("pool"));
          },
          [](std::int64_t b) {
            b = std::max<std::int64_t>(2, b);
            return fmt::format("snapkv:budget={},window={}", b, std::min<std::int64_t>(32, b / 2));
          }};
}

PolicyEntry pyramidkv_policy_entry() {
  return {"pyramidkv", "PyramidKV: SnapKV's selection with per-layer prompt budgets falling with depth, fp16",
          {{"budget", 64, 2, kMaxPolicyTokens, true, "mean prompt tokens per head over the layers"},
           {"ratio", 20, 1, 1000, false, "first-to-last layer budget falls to budget / ratio"},
           {"window", 8, 1, kMaxPolicyTokens, true, "observation window (last prompt queries), kept"},
           {"pool", 7, 1, 101, true, "max-pooling width (odd)"}},
          [](const PolicyParams& p) {
            p.require(p.integer("window") < p.integer("budget"), "window must be smaller than budget");
            p.require(p.integer("pool") % 2 == 1, "pool must be odd");
            return make_pyramidkv_policy(p.integer("budget"), p["ratio"], p.integer("window"),
                                         p.integer("pool"));
          },
          [](std::int64_t b) {
            b = std::max<std::int64_t>(2, b);
            return fmt::format("pyramidkv:budget={},window={}", b, std::min<std::int64_t>(8, b / 2));
          }};
}

}  // namespace kvcheck
