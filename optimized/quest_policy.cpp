#include "optimized/quest_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "optimized/policy_registry.h"

namespace kvcheck {
namespace {

class QuestPolicy final : public KvPolicy {
 public:
  explicit QuestPolicy(std::int64_t pages) : pages_(pages) {}
  std::string name() const override { return fmt::format("quest:pages={}", pages_); }
  std::string description() const override {
    return fmt::format("every token kept in fp16; a decode step reads the {} pages with the largest key-range bound "
                       "on q·k, plus the page being written",
                       pages_);
  }
  // Each page stores its keys' fp16 min and max per channel: exact for fp16 keys, so the bound
  // holds on the stored keys.
  std::vector<KvTier> tiers() const override { return {{fp16_format(), fp16_format(), true}}; }
  std::int64_t selected_pages() const override { return pages_; }
  std::vector<std::size_t> select_pages(std::span<const float> q, std::int64_t group, std::int64_t head_dim,
                                        std::span<const float> key_min, std::span<const float> key_max,
                                        std::size_t written) const override {
    const auto d = static_cast<std::size_t>(head_dim);
    std::vector<float> bounds(key_min.size() / d);
    for (std::size_t i = 0; i < bounds.size(); ++i) {
      bounds[i] = quest_page_bound(q, group, head_dim, key_min.subspan(i * d, d), key_max.subspan(i * d, d));
    }
    return top_bound_pages(bounds, pages_, written);
  }

 private:
  std::int64_t pages_;
};

}  // namespace

float quest_page_bound(std::span<const float> q, std::int64_t group, std::int64_t head_dim,
                       std::span<const float> key_min, std::span<const float> key_max) {
  float best = 0.0f;
  for (std::int64_t g = 0; g < group; ++g) {
    const float* qg = q.data() + g * head_dim;
    float u = 0.0f;
    for (std::int64_t c = 0; c < head_dim; ++c) {
      const auto i = static_cast<std::size_t>(c);
      u += std::max(qg[c] * key_min[i], qg[c] * key_max[i]);
    }
    best = g == 0 ? u : std::max(best, u);
  }
  return best;
}

std::vector<std::size_t> top_bound_pages(std::span<const float> bounds, std::int64_t k, std::size_t written) {
  std::vector<std::size_t> others;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (i != written) others.push_back(i);
  }
  const auto take = static_cast<std::size_t>(std::min<std::int64_t>(k, static_cast<std::int64_t>(others.size())));
  std::stable_sort(others.begin(), others.end(), [&](std::size_t a, std::size_t b) { return bounds[a] > bounds[b]; });
  std::vector<std::size_t> chosen(others.begin(), others.begin() + static_cast<std::ptrdiff_t>(take));
  if (written < bounds.size()) chosen.push_back(written);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

PolicyEntry quest_policy_entry() {
  return {"quest",
          "every token kept in fp16, per-page key min/max; a decode step reads the K pages with the largest bound on "
          "q·k and the page being written (Quest)",
          {{"pages", 1, 1, kMaxPolicyTokens, true, "K: pages a decode step reads besides the one being written"}},
          [](const PolicyParams& p) { return std::make_unique<QuestPolicy>(p.integer("pages")); }};
}

}  // namespace kvcheck
