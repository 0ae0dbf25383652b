// XKV's Algorithm 1 (optimized/xkv_policy.h) against the optimum it claims: on small random
// instances, the sum of the layers' importance retention ratios it reaches for a total equals
// the best any allocation of that total reaches (dynamic programming over the layers), the
// allocation hands out exactly the total, and the retention mode stops at the first allocation
// whose mean retention reaches the target. A planted variant that ranks raw scores instead of
// normalised ones is shown to miss the optimum.
//   RC_PARAMS="seed=N" build-cpu/properties/kvcheck_property_tests --gtest_filter='XkvAllocation*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "optimized/xkv_policy.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;
using Scores = std::vector<std::vector<double>>;

// R_l(n) for every n: prefix sums of the sorted, normalised scores.
std::vector<std::vector<double>> retention_curves(const Scores& scores) {
  std::vector<std::vector<double>> r;
  for (std::vector<double> w : scores) {
    std::sort(w.begin(), w.end(), std::greater<>());
    const double sum = std::accumulate(w.begin(), w.end(), 0.0);
    std::vector<double> c{0.0};
    for (double x : w) c.push_back(c.back() + (sum > 0 ? x / sum : 0.0));
    r.push_back(c);
  }
  return r;
}

double objective(const Scores& scores, const std::vector<std::int64_t>& n) {
  const auto r = retention_curves(scores);
  double sum = 0.0;
  for (std::size_t l = 0; l < n.size(); ++l) sum += r[l][static_cast<std::size_t>(n[l])];
  return sum;
}

// The best sum of R_l over allocations of exactly `total` (dynamic programming over layers).
double optimum(const Scores& scores, std::int64_t total) {
  const auto r = retention_curves(scores);
  std::vector<double> best(static_cast<std::size_t>(total) + 1, -std::numeric_limits<double>::infinity());
  best[0] = 0.0;
  for (const auto& curve : r) {
    std::vector<double> next(best.size(), -std::numeric_limits<double>::infinity());
    for (std::size_t t = 0; t < best.size(); ++t) {
      for (std::size_t k = 0; k < curve.size() && k <= t; ++k) next[t] = std::max(next[t], best[t - k] + curve[k]);
    }
    best = next;
  }
  return best[static_cast<std::size_t>(total)];
}

Scores gen_scores() {
  const auto layers = *rc::gen::inRange<std::size_t>(1, 5);
  Scores s;
  for (std::size_t l = 0; l < layers; ++l) {
    // Layers of different sizes and scales: raw and normalised rankings then differ.
    const auto n = *rc::gen::inRange<std::size_t>(1, 8);
    const double scale = *rc::gen::element(0.01, 1.0, 50.0);
    std::vector<double> w;
    for (std::size_t i = 0; i < n; ++i) w.push_back(scale * *rc::gen::inRange<int>(0, 1000) / 1000.0);
    s.push_back(w);
  }
  return s;
}

std::int64_t available(const Scores& s) {
  std::int64_t n = 0;
  for (const auto& w : s) n += static_cast<std::int64_t>(w.size());
  return n;
}

TEST(XkvAllocation, GreedyReachesTheOptimumForItsTotal) {
  check_property("xkv greedy == DP optimum", 1000, [] {
    const Scores s = gen_scores();
    const std::int64_t total = *rc::gen::inRange<std::int64_t>(0, available(s) + 3);
    const std::vector<std::int64_t> n = xkv_allocate(s, total);
    RC_ASSERT(n.size() == s.size());
    RC_ASSERT(std::accumulate(n.begin(), n.end(), std::int64_t{0}) == std::min(total, available(s)));
    for (std::size_t l = 0; l < n.size(); ++l) RC_ASSERT(n[l] >= 0 && n[l] <= static_cast<std::int64_t>(s[l].size()));
    const double want = optimum(s, std::min(total, available(s)));
    RC_ASSERT(std::abs(objective(s, n) - want) <= 1e-9);
  });
}

TEST(XkvAllocation, RetentionModeStopsAtTheTarget) {
  check_property("xkv retention mode", 500, [] {
    const Scores s = gen_scores();
    const double target = *rc::gen::element(0.1, 0.5, 0.9, 1.0);
    const std::vector<std::int64_t> n = xkv_allocate(s, -1, target);
    const auto layers = static_cast<double>(s.size());
    const double mean = objective(s, n) / layers;
    const std::int64_t handed = std::accumulate(n.begin(), n.end(), std::int64_t{0});
    // Reached (or everything handed out), and one token fewer (the greedy prefix) had not.
    RC_ASSERT(mean >= target - 1e-12 || handed == available(s));
    if (handed > 0) {
      RC_ASSERT(objective(s, xkv_allocate(s, handed - 1)) / layers < target);
    }
  });
}

// The planted bug: rank raw scores, not each layer's scores over its own sum.
std::vector<std::int64_t> allocate_by_raw_scores(const Scores& scores, std::int64_t total) {
  std::vector<std::pair<double, std::size_t>> all;
  for (std::size_t l = 0; l < scores.size(); ++l) {
    for (double x : scores[l]) all.emplace_back(x, l);
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::int64_t> n(scores.size(), 0);
  for (std::int64_t i = 0; i < total && i < static_cast<std::int64_t>(all.size()); ++i) ++n[all[static_cast<std::size_t>(i)].second];
  return n;
}

TEST(XkvAllocation, PlantedRawScoreAllocationMissesTheOptimum) {
  std::mt19937_64 rng(7);
  bool caught = false;
  for (int i = 0; i < 200 && !caught; ++i) {
    Scores s(3);
    for (std::size_t l = 0; l < s.size(); ++l) {
      const double scale = l == 0 ? 100.0 : 1.0;
      for (int k = 0; k < 5; ++k) s[l].push_back(scale * static_cast<double>(rng() % 1000) / 1000.0);
    }
    const std::int64_t total = 1 + static_cast<std::int64_t>(rng() % 14);
    caught = objective(s, allocate_by_raw_scores(s, total)) < optimum(s, total) - 1e-9;
  }
  EXPECT_TRUE(caught) << "the DP optimum does not tell raw from normalised allocation";
}

TEST(XkvAllocation, HandComputedCase) {
  // Layer 0: {3, 1} -> normalised {.75, .25}; layer 1: {1, 1, 2} -> {.5, .25, .25}.
  // Greedy order: .75 (0), .5 (1), then .25 ties -> layer 0 first.
  const Scores s = {{3, 1}, {1, 1, 2}};
  EXPECT_EQ(xkv_allocate(s, 2), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(xkv_allocate(s, 3), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(xkv_allocate(s, 9), (std::vector<std::int64_t>{2, 3}));
  // Mean retention >= .6: after .75 and .5 the mean is .625.
  EXPECT_EQ(xkv_allocate(s, -1, 0.6), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(average_pool(std::vector<float>{3, 0, 0, 6}, 3), (std::vector<float>{1.5f, 1.0f, 2.0f, 3.0f}));
}

}  // namespace
}  // namespace kvcheck
