#include "oracles/attention_structure.h"

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

namespace kvcheck {

AttentionConcentration attention_concentration(std::span<const double> probs) {
  if (probs.empty()) throw std::invalid_argument("attention_concentration: no keys");
  const auto n = static_cast<std::int64_t>(probs.size());
  std::vector<double> sorted(probs.begin(), probs.end());
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  AttentionConcentration c;
  c.first_token_mass = probs[0];
  const std::int64_t top = (n + 9) / 10;  // ceil(0.1 n)
  for (std::int64_t i = 0; i < top; ++i) c.top10_share += sorted[static_cast<std::size_t>(i)];
  double cumulative = 0.0;
  c.tokens_for_95 = n;
  for (std::int64_t i = 0; i < n; ++i) {
    cumulative += sorted[static_cast<std::size_t>(i)];
    if (cumulative >= 0.95 - 1e-12) {
      c.tokens_for_95 = i + 1;
      break;
    }
  }
  c.frac_for_95 = static_cast<double>(c.tokens_for_95) / static_cast<double>(n);
  return c;
}

namespace {

// Sums the probabilities of each GQA group's query heads, per (layer, kv head, query position),
// for query positions >= first_query.
class GroupProbsRecorder : public AttentionRecorder {
 public:
  GroupProbsRecorder(std::int64_t group, std::int64_t first_query) : group_(group), first_query_(first_query) {}

  bool wants_probs(std::int64_t /*layer*/) const override { return true; }
  void on_probs(std::int64_t layer, std::int64_t head, std::int64_t query_pos, std::span<const double> probs) override {
    if (query_pos < first_query_) return;
    // Keys beyond the query are masked (probability 0): keep positions 0 .. query_pos.
    const auto n = static_cast<std::size_t>(query_pos + 1);
    std::vector<double>& sum = sums_[{layer, head / group_, query_pos}];
    if (sum.empty()) sum.assign(n, 0.0);
    for (std::size_t j = 0; j < n; ++j) sum[j] += probs[j];
  }

  // (layer, kv head, query position) -> summed probabilities over keys 0 .. query position.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, std::vector<double>> sums_;

 private:
  std::int64_t group_;
  std::int64_t first_query_;
};

}  // namespace

std::vector<HeadAttentionStats> attention_structure(const ReferenceModel& model,
                                                    std::span<const std::vector<std::int32_t>> prompts,
                                                    std::int64_t last_queries, const ProgressFn& progress) {
  if (prompts.empty()) throw std::invalid_argument("attention_structure: no prompts");
  if (last_queries < 1) throw std::invalid_argument("attention_structure: last_queries must be at least 1");
  const ModelConfig& c = model.config();
  for (std::size_t p = 0; p < prompts.size(); ++p) model.check_tokens(prompts[p], 0, fmt::format("attention prompt {}", p));

  std::vector<HeadAttentionStats> stats;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (std::int64_t h = 0; h < c.num_key_value_heads; ++h) stats.push_back({l, h, 0, 0.0, 0.0, 0.0, 0.0});
  }
  const auto total = static_cast<std::int64_t>(prompts.size());
  if (progress) progress(0, total);
  const auto group = static_cast<double>(c.group_size());
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const auto t = static_cast<std::int64_t>(prompts[p].size());
    GroupProbsRecorder recorder(c.group_size(), std::max<std::int64_t>(0, t - last_queries));
    (void)model.forward(prompts[p], &recorder);
    for (auto& [key, sum] : recorder.sums_) {
      for (double& x : sum) x /= group;  // mean over the group's query heads
      const AttentionConcentration a = attention_concentration(sum);
      HeadAttentionStats& s = stats[static_cast<std::size_t>(std::get<0>(key) * c.num_key_value_heads + std::get<1>(key))];
      ++s.samples;
      s.first_token_mass += a.first_token_mass;
      s.top10_share += a.top10_share;
      s.tokens_for_95 += static_cast<double>(a.tokens_for_95);
      s.frac_for_95 += a.frac_for_95;
    }
    if (progress) progress(static_cast<std::int64_t>(p) + 1, total);
  }
  for (HeadAttentionStats& s : stats) {
    const auto n = static_cast<double>(s.samples);
    s.first_token_mass /= n;
    s.top10_share /= n;
    s.tokens_for_95 /= n;
    s.frac_for_95 /= n;
  }
  return stats;
}

}  // namespace kvcheck
