#include "optimized/adakv_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <tuple>

#include "optimized/eviction_policies.h"
#include "optimized/policy_registry.h"

namespace kvcheck {

std::vector<std::vector<std::int32_t>> adakv_select(const std::vector<std::vector<float>>& scores, std::int64_t per_head,
                                                    std::int64_t floor) {
  if (floor > per_head) throw std::invalid_argument("adakv_select: the floor exceeds the budget per head");
  const std::size_t heads = scores.size();
  const auto candidates = static_cast<std::int64_t>(heads == 0 ? 0 : scores[0].size());
  for (const std::vector<float>& s : scores) {
    if (static_cast<std::int64_t>(s.size()) != candidates) {
      throw std::invalid_argument("adakv_select: heads with different numbers of candidates");
    }
  }
  std::vector<std::vector<std::int32_t>> kept(heads);
  if (candidates <= per_head) {
    for (auto& k : kept) {
      k.resize(static_cast<std::size_t>(candidates));
      std::iota(k.begin(), k.end(), 0);
    }
    return kept;
  }
  // The floors: each head's own top `floor`.
  std::vector<std::vector<bool>> taken(heads, std::vector<bool>(static_cast<std::size_t>(candidates), false));
  for (std::size_t h = 0; h < heads; ++h) {
    for (std::int32_t j : top_positions(scores[h], candidates, floor)) taken[h][static_cast<std::size_t>(j)] = true;
  }
  // The rest: the best pairs not yet taken, across the heads.
  struct Pair {
    float score;
    std::int32_t head, position;
  };
  std::vector<Pair> rest;
  for (std::size_t h = 0; h < heads; ++h) {
    for (std::int64_t j = 0; j < candidates; ++j) {
      if (!taken[h][static_cast<std::size_t>(j)]) {
        rest.push_back({scores[h][static_cast<std::size_t>(j)], static_cast<std::int32_t>(h), static_cast<std::int32_t>(j)});
      }
    }
  }
  const auto shared = static_cast<std::ptrdiff_t>(static_cast<std::int64_t>(heads) * (per_head - floor));
  std::partial_sort(rest.begin(), rest.begin() + shared, rest.end(), [](const Pair& a, const Pair& b) {
    if (a.score != b.score) return a.score > b.score;
    return std::tie(a.head, a.position) < std::tie(b.head, b.position);
  });
  for (std::ptrdiff_t i = 0; i < shared; ++i) {
    taken[static_cast<std::size_t>(rest[static_cast<std::size_t>(i)].head)]
         [static_cast<std::size_t>(rest[static_cast<std::size_t>(i)].position)] = true;
  }
  for (std::size_t h = 0; h < heads; ++h) {
    for (std::int64_t j = 0; j < candidates; ++j) {
      if (taken[h][static_cast<std::size_t>(j)]) kept[h].push_back(static_cast<std::int32_t>(j));
    }
  }
  return kept;
}

std::int64_t adakv_layer_budget(const AdaKvParams& p, std::int32_t layer, std::int32_t layers, std::int64_t prompt) {
  if (p.base == AdaKvBase::kSnapKv) return p.budget;
  return pyramid_budgets(p.budget, p.ratio, p.window, layers, prompt).at(static_cast<std::size_t>(layer));
}

std::int64_t adakv_floor_tokens(const AdaKvParams& p, std::int64_t layer_budget) {
  // Rounded up: any floor > 0 keeps at least one candidate per head. Rounded down, a head of a
  // layer with one slot per head (PyramidKV's last layer) could lose its only one, usually its
  // attention sink: on the embedded model that raised the KL of base=pyramidkv at budgets 32 and
  // 64 fivefold. (The 1e-9: a share such as 0.28 of 25 is 7.000000000000001 in doubles.)
  const std::int64_t per_head = std::max<std::int64_t>(0, layer_budget - p.window);
  return std::min(per_head, static_cast<std::int64_t>(std::ceil(p.floor * static_cast<double>(per_head) - 1e-9)));
}

namespace {

const char* base_name(AdaKvBase b) { return b == AdaKvBase::kSnapKv ? "snapkv" : "pyramidkv"; }

class AdaKvPolicy final : public KvPolicy {
 public:
  explicit AdaKvPolicy(const AdaKvParams& p) : p_(p) {}
  std::string name() const override {
    return p_.base == AdaKvBase::kSnapKv
               ? fmt::format("adakv:budget={},base=snapkv,floor={},window={},pool={}", p_.budget, p_.floor, p_.window,
                             p_.pool)
               : fmt::format("adakv:budget={},base=pyramidkv,floor={},ratio={},window={},pool={}", p_.budget, p_.floor,
                             p_.ratio, p_.window, p_.pool);
  }
  std::string description() const override {
    return fmt::format("Ada-KV: {}'s per-layer total of {} prompt tokens per head shared among the layer's heads by "
                       "their observation-window scores (each head keeps at least {} of its share), generated tokens "
                       "all kept, fp16",
                       base_name(p_.base), p_.budget, p_.floor);
  }
  std::vector<KvTier> tiers() const override { return {KvTier{fp16_format(), fp16_format()}}; }
  bool evicts() const override { return true; }
  std::int64_t observation_window() const override { return p_.window; }

  std::vector<PromptSelection> select_prompt_all(std::int64_t n, std::int64_t kv_heads,
                                                 std::span<const PromptScores> heads) const override {
    const auto layers = static_cast<std::int32_t>(static_cast<std::int64_t>(heads.size()) / kv_heads);
    std::vector<PromptSelection> out(heads.size());
    for (std::int32_t l = 0; l < layers; ++l) {
      const std::int64_t b = adakv_layer_budget(p_, l, layers, n);
      const std::size_t first = static_cast<std::size_t>(l * kv_heads);
      if (n <= b) {
        for (std::int64_t h = 0; h < kv_heads; ++h) {
          out[first + static_cast<std::size_t>(h)].high.resize(static_cast<std::size_t>(n));
          std::iota(out[first + static_cast<std::size_t>(h)].high.begin(),
                    out[first + static_cast<std::size_t>(h)].high.end(), 0);
        }
        continue;
      }
      const std::int64_t candidates = n - p_.window;
      std::vector<std::vector<float>> pooled;
      for (std::int64_t h = 0; h < kv_heads; ++h) {
        pooled.push_back(max_pool(heads[first + static_cast<std::size_t>(h)].window.first(static_cast<std::size_t>(candidates)),
                                  p_.pool));
      }
      const std::vector<std::vector<std::int32_t>> kept = adakv_select(pooled, b - p_.window, adakv_floor_tokens(p_, b));
      for (std::int64_t h = 0; h < kv_heads; ++h) {
        std::vector<std::int32_t>& high = out[first + static_cast<std::size_t>(h)].high;
        high = kept[static_cast<std::size_t>(h)];
        for (std::int64_t j = candidates; j < n; ++j) high.push_back(static_cast<std::int32_t>(j));
      }
    }
    return out;
  }

 private:
  AdaKvParams p_;
};

}  // namespace

std::unique_ptr<KvPolicy> make_adakv_policy(const AdaKvParams& params) { return std::make_unique<AdaKvPolicy>(params); }

PolicyEntry adakv_policy_entry() {
  return {"adakv", "Ada-KV: SnapKV's or PyramidKV's per-layer total shared among the layer's heads by score, fp16",
          {{"budget", 64, 2, kMaxPolicyTokens, true, "prompt tokens per head, on average over a layer's heads"},
           {"base", 0, 0, 1, true, "snapkv (every layer the budget) or pyramidkv (budgets falling with depth)", false,
            {"snapkv", "pyramidkv"}},
           {"floor", 0.2, 0, 1, false, "share of budget - window every head keeps on its own"},
           {"ratio", 20, 1, 1000, false, "base=pyramidkv: first-to-last layer budget falls to budget / ratio"},
           {"window", 32, 1, kMaxPolicyTokens, true, "observation window (last prompt queries), kept"},
           {"pool", 7, 1, 101, true, "max-pooling width (odd)"}},
          [](const PolicyParams& p) {
            AdaKvParams a;
            a.budget = p.integer("budget");
            a.base = p.integer("base") == 0 ? AdaKvBase::kSnapKv : AdaKvBase::kPyramidKv;
            a.floor = p["floor"];
            a.ratio = p["ratio"];
            a.window = p.integer("window");
            a.pool = p.integer("pool");
            p.require(a.window < a.budget, "window must be smaller than budget");
            p.require(a.pool % 2 == 1, "pool must be odd");
            return make_adakv_policy(a);
          },
          [](std::int64_t b) {
            b = std::max<std::int64_t>(2, b);
            return fmt::format("adakv:budget={},window={}", b, std::min<std::int64_t>(32, b / 2));
          }};
}

}  // namespace kvcheck
