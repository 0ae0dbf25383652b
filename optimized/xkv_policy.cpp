#include "optimized/xkv_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "optimized/eviction_policies.h"

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
    r_total += w[*best][static_cast<std::size_t>(n[*best])];
    ++n[*best];
  }
  return n;
}

namespace {

class XkvPolicy final : public KvPolicy {
 public:
  XkvPolicy(std::int64_t budget, double retention, std::int64_t window, std::int64_t pool)
      : budget_(budget), retention_(retention), window_(window), pool_(pool) {}
  std::string name() const override {
    return retention_ > 0 ? fmt::format("xkv:retention={},window={},pool={}", retention_, window_, pool_)
                          : fmt::format("xkv:budget={},window={},pool={}", budget_, window_, pool_);
  }
  std::string description() const override {
    return fmt::format("XKV: per-layer prompt budgets by greedy importance retention ({}), observation window {}, "
                       "average pooling {}, generated tokens all kept, fp16",
                       retention_ > 0 ? fmt::format("mean retention {}", retention_)
                                      : fmt::format("mean {} tokens", budget_),
                       window_, pool_);
  }
  std::vector<KvTier> tiers() const override { return {KvTier{fp16_format(), fp16_format()}}; }
  bool evicts() const override { return true; }
  std::int64_t observation_window() const override { return window_; }
  bool selects_across_layers() const override { return true; }

  std::vector<PromptSelection> select_prompt_all(std::int64_t n, std::int64_t kv_heads,
                                                 std::span<const PromptScores> heads) const override {
    const std::int64_t layers = static_cast<std::int64_t>(heads.size()) / kv_heads;
    const std::int64_t candidates = std::max<std::int64_t>(0, n - window_);
    std::vector<std::vector<float>> pooled(heads.size());
    std::vector<std::vector<double>> layer_scores(static_cast<std::size_t>(layers),
                                                  std::vector<double>(static_cast<std::size_t>(candidates), 0.0));
    for (std::size_t i = 0; i < heads.size(); ++i) {
      pooled[i] = average_pool(heads[i].window.first(static_cast<std::size_t>(candidates)), pool_);
      for (std::int64_t j = 0; j < candidates; ++j) {
        layer_scores[i / static_cast<std::size_t>(kv_heads)][static_cast<std::size_t>(j)] +=
            pooled[i][static_cast<std::size_t>(j)] / static_cast<double>(kv_heads);
      }
    }
    const std::vector<std::int64_t> alloc =
        retention_ > 0 ? xkv_allocate(layer_scores, -1, retention_)
                       : xkv_allocate(layer_scores, layers * std::max<std::int64_t>(0, budget_ - window_));
    std::vector<PromptSelection> out(heads.size());
    for (std::size_t i = 0; i < heads.size(); ++i) {
      out[i].high = top_positions(pooled[i], candidates, alloc[i / static_cast<std::size_t>(kv_heads)]);
      for (std::int64_t j = candidates; j < n; ++j) out[i].high.push_back(static_cast<std::int32_t>(j));
    }
    return out;
  }

 private:
  std::int64_t budget_;
  double retention_;
  std::int64_t window_, pool_;
};

}  // namespace

std::unique_ptr<KvPolicy> make_xkv_policy(std::int64_t budget, double retention, std::int64_t window,
                                          std::int64_t pool) {
  return std::make_unique<XkvPolicy>(budget, retention, window, pool);
}

}  // namespace kvcheck
