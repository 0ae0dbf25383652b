// LeanKV's static mode (optimized/leankv_policy.h) beside its dynamic mode: the prompt ranking is
// the one the dynamic thresholds cut, so a static head given the dynamic head's own counts keeps
// exactly the dynamic head's tiers; the decode rule on hand-computed cases; and the counts it
// holds. The per-step property (PolicyStepProps) checks the counts and the rule at every step of real
// runs.
//   RC_PARAMS="seed=N" build-cpu/properties/kvcheck_property_tests --gtest_filter='LeanKvStatic*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "optimized/kv_policy.h"
#include "optimized/leankv_policy.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;

TEST(LeanKvStatic, PromptRankingIsTheOneTheDynamicThresholdsCut) {
  check_property("leankv static prompt == dynamic prompt at the dynamic counts", 1000, [] {
    const auto n = *rc::gen::inRange<std::int64_t>(1, 60);
    const auto window = *rc::gen::inRange<std::int64_t>(1, 12);
    const double alpha_h = *rc::gen::element(0.5, 1.0, 2.0);
    const double alpha_l = alpha_h * *rc::gen::element(0.02, 0.2, 0.6);
    // Column sums of a causal prompt: position j is seen by n - j queries, each giving at most 1.
    std::vector<float> all;
    for (std::int64_t j = 0; j < n; ++j) {
      all.push_back(static_cast<float>(n - j) * static_cast<float>(*rc::gen::inRange(1, 100000)) / 100000.0f /
                    static_cast<float>(*rc::gen::inRange(1, 40)));
    }
    const PromptScores scores{all, {}, 1};
    const auto dynamic = make_policy(fmt::format("leankv:alpha_h={},alpha_l={},window={}", alpha_h, alpha_l, window));
    const PromptSelection d = dynamic->select_prompt_tiers(0, n, scores);
    const std::int64_t high_outside = static_cast<std::int64_t>(d.high.size()) - std::min(n, window);
    const auto fixed = make_policy(fmt::format("leankv:static_high={},static_low={},window={}", high_outside,
                                               d.low.size(), window));
    const PromptSelection st = fixed->select_prompt_tiers(0, n, scores);
    RC_ASSERT(st.high == d.high);
    RC_ASSERT(st.low == d.low);
    RC_TAG(d.low.empty() ? "no low tokens" : "low tokens");
  });
}

TEST(LeanKvStatic, PromptKeepsTheWindowThenTheTopRanked) {
  // n = 8, window 2: positions 6 and 7 high; the others ranked by sum / (n - j) * (j + 1):
  // j:    0     1     2     3     4     5
  // sum:  8     0.7   3     0.4   2     0.3
  // key:  1     0.2   1.5   0.32  2.5   0.6   -> 4, 2 high; 0, 5 low; 3, 1 dropped
  const std::vector<float> all = {8, 0.7f, 3, 0.4f, 2, 0.3f, 1, 1};
  const PromptScores scores{all, {}, 1};
  const PromptSelection s = make_policy("leankv:static_high=2,static_low=2,window=2")->select_prompt_tiers(0, 8, scores);
  EXPECT_EQ(s.high, (std::vector<std::int32_t>{2, 4, 6, 7}));
  EXPECT_EQ(s.low, (std::vector<std::int32_t>{0, 5}));
  // A prompt shorter than the counts keeps everything, high first.
  const PromptSelection t = make_policy("leankv:static_high=3,static_low=9,window=2")->select_prompt_tiers(0, 5, scores);
  EXPECT_EQ(t.high, (std::vector<std::int32_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(t.low.empty());
}

TEST(LeanKvStatic, DecodeRuleOnHandComputedCases) {
  // Window 2, N = 2 high and M = 1 low outside it. Position 10 joins: the candidate is 8.
  // Significance = score / (10 - position).
  const auto p = make_policy("leankv:static_high=2,static_low=1,window=2");
  std::vector<LiveToken> live = {{1, 4.5f, 0},   // sig 0.5
                                 {3, 1.75f, 0},  // sig 0.25
                                 {5, 1.5f, 1},   // sig 0.3 (low)
                                 {8, 0.2f, 0},   // the candidate, sig 0.1
                                 {9, 0.5f, 0}};  // in the window after the step
  // Three high outside the window: the least significant (8, sig 0.1) against the low 5 (0.3):
  // 8 is dropped, nothing moves.
  StepDecision d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.evict, std::optional<std::size_t>(3));
  EXPECT_EQ(d.demote, std::nullopt);
  // The candidate significant (sig 0.6): the least high is 3 (0.25), less than the low 5 (0.3).
  live[3].score = 1.2f;
  d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.evict, std::optional<std::size_t>(1));
  EXPECT_EQ(d.demote, std::nullopt);
  // The low token weaker (sig 0.1): 3 moves to low and 5 is dropped.
  live[2].score = 0.5f;
  d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.demote, std::optional<std::size_t>(1));
  EXPECT_EQ(d.evict, std::optional<std::size_t>(2));
  // Equal significance (0.25 each): the older (3) is dropped.
  live[2].score = 1.25f;
  d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.evict, std::optional<std::size_t>(1));
  EXPECT_EQ(d.demote, std::nullopt);
  // The low tier not full yet: the victim moves there, nothing is dropped.
  live.erase(live.begin() + 2);
  d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.demote, std::optional<std::size_t>(1));
  EXPECT_EQ(d.evict, std::nullopt);
  // High not over its count (1 and 8 outside the window): nothing happens.
  live.erase(live.begin() + 1);
  d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.demote, std::nullopt);
  EXPECT_EQ(d.evict, std::nullopt);
  // No low tier (M = 0): the victim is dropped.
  const auto no_low = make_policy("leankv:static_high=1,static_low=0,window=2");
  d = no_low->decide_step(0, live, 10);
  EXPECT_EQ(d.evict, std::optional<std::size_t>(0));  // 1 (sig 0.5) is less significant than 8 (0.6)
  EXPECT_EQ(d.demote, std::nullopt);
  // Before the window fills, nothing happens.
  EXPECT_EQ(p->decide_step(0, live, 1).evict, std::nullopt);
}

TEST(LeanKvStatic, CountsDependOnThePositionOnly) {
  LeanKvParams lp;
  lp.window = 4;
  lp.static_high = 3;
  lp.static_low = 2;
  using Counts = std::pair<std::int64_t, std::int64_t>;
  EXPECT_EQ(leankv_static_counts(lp, 0), (Counts{1, 0}));    // one token: in the window
  EXPECT_EQ(leankv_static_counts(lp, 3), (Counts{4, 0}));    // the window full
  EXPECT_EQ(leankv_static_counts(lp, 5), (Counts{6, 0}));    // 2 outside, both high
  EXPECT_EQ(leankv_static_counts(lp, 8), (Counts{7, 2}));    // 5 outside: 3 high, 2 low
  EXPECT_EQ(leankv_static_counts(lp, 100), (Counts{7, 2}));  // then fixed
}

}  // namespace
}  // namespace kvcheck
