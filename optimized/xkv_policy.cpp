#include "optimized/xkv_policy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "optimized/eviction_policies.h"
#include "optimized/policy_registry.h"
#include "reference/errors.h"

namespace kvcheck {

std::vector<float> average_pool(std::span<const float> scores, std::int64_t pool) {
  const std::int64_t n = static_cast<std::int64_t>(scores.size());
  const std::int64_t half = pool / 2;
  std::vector<float> out(scores.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t a = std::max<std::int64_t>(0, i - half), b = std::min(n - 1, i + half);
    double sum = 0.0;
    for (std::int64_t j = a; j <= b; ++j) sum += scores[static_cast<std::size_t>(j)];
    out[static_cast<std::size_t>(i)] = static_cast<float>(sum / static_cast<double>(b - a + 1));
  }
  return out;
}

std::vector<std::int64_t> xkv_allocate(const std::vector<std::vector<double>>& scores, std::int64_t total,
                                       double retention) {
  const std::size_t layers = scores.size();
  std::vector<std::vector<double>> w(layers);
  for (std::size_t l = 0; l < layers; ++l) {
    w[l] = scores[l];
    std::sort(w[l].begin(), w[l].end(), std::greater<>());
    const double sum = std::accumulate(w[l].begin(), w[l].end(), 0.0);
    for (double& x : w[l]) x = sum > 0 ? x / sum : 0.0;
  }
  std::vector<std::int64_t> n(layers, 0);
  std::int64_t available = 0;
  for (const auto& v : w) available += static_cast<std::int64_t>(v.size());
  const std::int64_t steps = total >= 0 ? std::min(total, available) : available;
  double r_total = 0.0;
  for (std::int64_t s = 0; s < steps; ++s) {
    if (total < 0 && r_total / static_cast<double>(layers) >= retention) break;
    std::optional<std::size_t> best;
    for (std::size_t l = 0; l < layers; ++l) {
      if (n[l] >= static_cast<std::int64_t>(w[l].size())) continue;
      if (!best || w[l][static_cast<std::size_t>(n[l])] > w[*best][static_cast<std::size_t>(n[*best])]) best = l;
    }
    const double gain = w[*best][static_cast<std::size_t>(n[*best])];
    // Retention mode: tokens of zero weight retain nothing, so they are never handed out to reach
    // a target that rounding of r_total left one ulp short (target 1.0 would keep every token).
    if (total < 0 && gain <= 0.0) break;
    r_total += gain;
    ++n[*best];
  }
  return n;
}

std::vector<std::int64_t> xkv_average_allocation(const std::vector<std::vector<std::vector<double>>>& samples,
                                                 std::int64_t total) {
  if (samples.empty()) throw InputError("xkv averaged allocation: no sampled requests");
  const std::size_t layers = samples[0].size();
  const auto k = static_cast<std::int64_t>(samples.size());
  std::vector<std::int64_t> sums(layers, 0);
  for (std::size_t s = 0; s < samples.size(); ++s) {
    if (samples[s].size() != layers) {
      throw std::invalid_argument(fmt::format("xkv averaged allocation: sample {} has {} layers, sample 0 has {}", s,
                                              samples[s].size(), layers));
    }
    std::int64_t available = 0;
    for (const auto& w : samples[s]) available += static_cast<std::int64_t>(w.size());
    if (available < total) {
      throw InputError(fmt::format("xkv averaged allocation: sample {} has {} candidate tokens over its {} layers, "
                                   "fewer than the total {} (use longer prompts or a smaller budget)",
                                   s, available, layers, total));
    }
    const std::vector<std::int64_t> n = xkv_allocate(samples[s], total);
    for (std::size_t l = 0; l < layers; ++l) sums[l] += n[l];
  }
  std::vector<std::int64_t> out(layers);
  std::int64_t left = total;
  for (std::size_t l = 0; l < layers; ++l) {
    out[l] = sums[l] / k;
    left -= out[l];
  }
  // Largest remainder: `left` < layers, since the remainders sum to left * k.
  std::vector<std::size_t> order(layers);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sums[a] % k > sums[b] % k; });
  for (std::int64_t i = 0; i < left; ++i) ++out[order[static_cast<std::size_t>(i)]];
  return out;
}

namespace {

// Each head's pooled window sums over the candidates (the positions before the window) and
// each layer's mean of them.
struct LayerScores {
  std::vector<std::vector<float>> pooled;       // [layer * kv_heads + head][candidates]
  std::vector<std::vector<double>> per_layer;  // [layer][candidates]
};

LayerScores layer_scores(std::int64_t n, std::int64_t kv_heads, std::span<const PromptScores> heads, std::int64_t window,
                         std::int64_t pool) {
  const std::int64_t layers = static_cast<std::int64_t>(heads.size()) / kv_heads;
  const std::int64_t candidates = std::max<std::int64_t>(0, n - window);
  LayerScores out;
  out.pooled.resize(heads.size());
  out.per_layer.assign(static_cast<std::size_t>(layers), std::vector<double>(static_cast<std::size_t>(candidates), 0.0));
  for (std::size_t i = 0; i < heads.size(); ++i) {
    out.pooled[i] = average_pool(heads[i].window.first(static_cast<std::size_t>(candidates)), pool);
    for (std::int64_t j = 0; j < candidates; ++j) {
      out.per_layer[i / static_cast<std::size_t>(kv_heads)][static_cast<std::size_t>(j)] +=
          out.pooled[i][static_cast<std::size_t>(j)] / static_cast<double>(kv_heads);
    }
  }
  return out;
}

class XkvPolicy final : public KvPolicy {
 public:
  explicit XkvPolicy(XkvParams p) : p_(std::move(p)) {}
  std::string name() const override {
    if (!p_.layers.empty()) {
      return fmt::format("xkv:layers={},window={},pool={}", fmt::join(p_.layers, "/"), p_.window, p_.pool);
    }
    return p_.retention > 0 ? fmt::format("xkv:retention={},window={},pool={}", p_.retention, p_.window, p_.pool)
                            : fmt::format("xkv:budget={},window={},pool={}", p_.budget, p_.window, p_.pool);
  }
  std::string description() const override {
    const std::string allocation =
        !p_.layers.empty() ? fmt::format("fixed per-layer budgets {} (averaged allocation)", fmt::join(p_.layers, "/"))
        : p_.retention > 0 ? fmt::format("per-layer budgets by greedy importance retention (mean retention {})", p_.retention)
                           : fmt::format("per-layer budgets by greedy importance retention (mean {} tokens)", p_.budget);
    return fmt::format("XKV: {}, observation window {}, average pooling {}, generated tokens all kept, fp16",
                       allocation, p_.window, p_.pool);
  }
  std::vector<KvTier> tiers() const override { return {KvTier{fp16_format(), fp16_format()}}; }
  bool evicts() const override { return true; }
  std::int64_t observation_window() const override { return p_.window; }
  const XkvParams& params() const { return p_; }

  std::vector<PromptSelection> select_prompt_all(std::int64_t n, std::int64_t kv_heads,
                                                 std::span<const PromptScores> heads) const override {
    const std::int64_t layers = static_cast<std::int64_t>(heads.size()) / kv_heads;
    if (!p_.layers.empty() && static_cast<std::int64_t>(p_.layers.size()) != layers) {
      throw InputError(fmt::format("policy 'xkv': parameter 'layers' gives {} budgets ({}), the model has {} layers",
                                   p_.layers.size(), fmt::join(p_.layers, "/"), layers));
    }
    const std::int64_t candidates = std::max<std::int64_t>(0, n - p_.window);
    const LayerScores s = layer_scores(n, kv_heads, heads, p_.window, p_.pool);
    if (p_.on_layer_scores) p_.on_layer_scores(s.per_layer);
    const std::vector<std::int64_t> alloc =
        !p_.layers.empty() ? p_.layers
        : p_.retention > 0 ? xkv_allocate(s.per_layer, -1, p_.retention)
                           : xkv_allocate(s.per_layer, layers * std::max<std::int64_t>(0, p_.budget - p_.window));
    std::vector<PromptSelection> out(heads.size());
    for (std::size_t i = 0; i < heads.size(); ++i) {
      out[i].high = top_positions(s.pooled[i], candidates, alloc[i / static_cast<std::size_t>(kv_heads)]);
      for (std::int64_t j = candidates; j < n; ++j) out[i].high.push_back(static_cast<std::int32_t>(j));
    }
    return out;
  }

 private:
  XkvParams p_;
};

}  // namespace

std::vector<std::vector<double>> xkv_layer_scores(std::int64_t prompt_len, std::int64_t kv_heads,
                                                  std::span<const PromptScores> heads, std::int64_t window,
                                                  std::int64_t pool) {
  return layer_scores(prompt_len, kv_heads, heads, window, pool).per_layer;
}

std::unique_ptr<KvPolicy> make_xkv_policy(const XkvParams& params) { return std::make_unique<XkvPolicy>(params); }

std::unique_ptr<KvPolicy> make_xkv_policy(std::int64_t budget, double retention, std::int64_t window,
                                          std::int64_t pool) {
  XkvParams p;
  p.budget = budget;
  p.retention = retention;
  p.window = window;
  p.pool = pool;
  return make_xkv_policy(p);
}

std::optional<XkvParams> xkv_params_of(const KvPolicy& policy) {
  const auto* x = dynamic_cast<const XkvPolicy*>(&policy);
  return x ? std::optional<XkvParams>(x->params()) : std::nullopt;
}


PolicyEntry xkv_policy_entry() {
  return {"xkv", "XKV: SnapKV's selection with per-layer budgets from greedy importance retention, fp16",
          {{"budget", 64, 2, kMaxPolicyTokens, true, "mean prompt tokens per head over the layers"},
           {"retention", 0, 0, 1, false, "if > 0: allocate until the mean retention reaches it (no budget)"},
           {"window", 8, 1, kMaxPolicyTokens, true, "observation window (last prompt queries), kept"},
           {"pool", 7, 1, 101, true, "average-pooling width (odd)"},
           {"layers", 0, 0, kMaxPolicyTokens, true,
            "if set: fixed prompt tokens per head of each layer besides the window, one per layer, e.g. "
            "40/24/8 (the averaged allocation; verify --xkv-calibrate computes it); replaces budget",
            true}},
          [](const PolicyParams& p) {
            XkvParams xp;
            xp.budget = p.integer("budget");
            xp.retention = p["retention"];
            xp.window = p.integer("window");
            xp.pool = p.integer("pool");
            xp.layers = p.integers("layers");
            p.require(xp.layers.empty() || xp.retention == 0, "layers and retention exclude each other");
            p.require(!xp.layers.empty() || xp.retention > 0 || xp.window < xp.budget,
                      "window must be smaller than budget");
            p.require(xp.pool % 2 == 1, "pool must be odd");
            return make_xkv_policy(xp);
          },
          [](std::int64_t b) {
            b = std::max<std::int64_t>(2, b);
            return fmt::format("xkv:budget={},window={}", b, std::min<std::int64_t>(8, b / 2));
          }};
}

}  // namespace kvcheck
