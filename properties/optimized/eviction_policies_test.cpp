// The eviction policies' selection rules on hand-computed cases, and policy specs
// (`name:key=value,...`) with their errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "optimized/adakv_policy.h"
#include "optimized/duo_policy.h"
#include "optimized/eviction_policies.h"
#include "optimized/kivi_policy.h"
#include "optimized/kv_policy.h"
#include "optimized/leankv_policy.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using Positions = std::vector<std::int32_t>;

// The InputError make_policy(spec) throws, or "no error".
std::string message(const std::string& spec) {
  try {
    make_policy(spec);
  } catch (const InputError& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

TEST(PolicySpec, ParsesParametersAndNamesWhatIsWrong) {
  EXPECT_EQ(make_policy("h2o")->name(), "h2o:budget=64,recent=0.5");
  EXPECT_EQ(make_policy("h2o:recent=0.25,budget=10")->name(), "h2o:budget=10,recent=0.25");
  EXPECT_EQ(make_policy("streaming:window=8")->name(), "streaming:sinks=4,window=8");
  EXPECT_FALSE(make_policy("full-fp16")->evicts());
  EXPECT_TRUE(make_policy("snapkv")->evicts());
  EXPECT_NE(message("h2o:budgt=3").find("unknown parameter 'budgt'; its parameters: budget, recent"), std::string::npos);
  EXPECT_NE(message("h2o:budget=1.5").find("'budget' must be an integer"), std::string::npos);
  EXPECT_NE(message("h2o:budget=").find("'budget' needs a number"), std::string::npos);
  EXPECT_NE(message("h2o:budget=0").find("'budget' = 0 is outside"), std::string::npos);
  EXPECT_NE(message("h2o:recent=2").find("'recent' = 2 is outside [0, 1]"), std::string::npos);
  EXPECT_NE(message("snapkv:budget=8,window=8").find("window must be smaller than budget"), std::string::npos);
  EXPECT_NE(message("snapkv:pool=4").find("pool must be odd"), std::string::npos);
  EXPECT_NE(message("full-fp32:x=1").find("its parameters: none"), std::string::npos);
  EXPECT_NE(message("lean").find("unknown; known policies: full-fp32"), std::string::npos);
}

TEST(PolicySpec, PolicyListsSplitBetweenPolicies) {
  EXPECT_EQ(split_policy_list("int8,kv-bits:k=4,v=8, h2o ,,leankv:high_k=8"),
            (std::vector<std::string>{"int8", "kv-bits:k=4,v=8", "h2o", "leankv:high_k=8"}));
  EXPECT_EQ(split_policy_list("int4:rotate=hadamard-signs,rotate_seed=3,kivi2"),
            (std::vector<std::string>{"int4:rotate=hadamard-signs,rotate_seed=3", "kivi2"}));
  EXPECT_TRUE(split_policy_list("").empty());
}

TEST(PolicySpec, AdaKvAndDuoParameters) {
  EXPECT_EQ(make_policy("adakv")->name(), "adakv:budget=64,base=snapkv,floor=0.2,window=32,pool=7");
  EXPECT_EQ(make_policy("adakv:base=pyramidkv,window=8,floor=0")->name(),
            "adakv:budget=64,base=pyramidkv,floor=0,ratio=20,window=8,pool=7");
  EXPECT_NE(message("adakv:base=h2o").find("parameter 'base' must be one of snapkv, pyramidkv, got 'h2o'"),
            std::string::npos);
  EXPECT_NE(message("adakv:budget=16").find("window must be smaller than budget"), std::string::npos);
  EXPECT_NE(message("adakv:floor=1.5").find("'floor' = 1.5 is outside [0, 1]"), std::string::npos);
  // ratio 1 (every layer the same budget) is the flattest pyramid allowed; below it the budgets
  // would grow with depth.
  EXPECT_EQ(make_policy("adakv:base=pyramidkv,ratio=1")->name(), "adakv:budget=64,base=pyramidkv,floor=0.2,ratio=1,window=32,pool=7");
  EXPECT_NE(message("adakv:base=pyramidkv,ratio=0.5").find("'ratio' = 0.5 is outside [1, 1000]"), std::string::npos);
  EXPECT_EQ(make_policy("duo")->name(), "duo:retrieval=0.25,sinks=4,recent=60");
  EXPECT_EQ(make_policy("duo:heads=7/1,recent=8")->name(), "duo:sinks=4,recent=8,heads=1/7");
  EXPECT_NE(message("duo:heads=2/2").find("'heads' names a kv head twice"), std::string::npos);
  EXPECT_NE(message("duo:retrieval=2").find("'retrieval' = 2 is outside [0, 1]"), std::string::npos);
}

// Ada-KV's joint allocation: head 0's scores all beat head 1's, so without a floor head 0 takes
// the whole layer; each floor token moves one slot back to head 1.
TEST(AdaKvSelect, FloorsThenTheBestPairsAcrossHeads) {
  const std::vector<std::vector<float>> scores = {{5, 4, 3, 2}, {1, 0.5f, 0.4f, 0.3f}};
  EXPECT_EQ(adakv_select(scores, 2, 0), (std::vector<Positions>{{0, 1, 2, 3}, {}}));
  EXPECT_EQ(adakv_select(scores, 2, 1), (std::vector<Positions>{{0, 1, 2}, {0}}));
  EXPECT_EQ(adakv_select(scores, 2, 2), (std::vector<Positions>{{0, 1}, {0, 1}}));  // SnapKV's
  EXPECT_EQ(adakv_select(scores, 5, 0), (std::vector<Positions>{{0, 1, 2, 3}, {0, 1, 2, 3}}));  // all fit
  // Ties go to the lower head, then the lower position.
  EXPECT_EQ(adakv_select({{1, 1, 0}, {1, 1, 0}}, 1, 0), (std::vector<Positions>{{0, 1}, {}}));
  EXPECT_EQ(adakv_select({{0, 1, 1}, {1, 0, 0}}, 1, 0), (std::vector<Positions>{{1, 2}, {}}));
  EXPECT_THROW(adakv_select(scores, 1, 2), std::invalid_argument);
}

// The floor rounds up: one slot per head keeps it whatever the share (but 0).
TEST(AdaKvSelect, FloorRoundsUp) {
  AdaKvParams p;
  p.window = 8;
  p.floor = 0.2;
  EXPECT_EQ(adakv_floor_tokens(p, 9), 1);
  EXPECT_EQ(adakv_floor_tokens(p, 40), 7);  // 6.4
  p.floor = 0.25;
  EXPECT_EQ(adakv_floor_tokens(p, 40), 8);  // exactly
  p.floor = 0.28;
  EXPECT_EQ(adakv_floor_tokens(p, 33), 7);  // 0.28 x 25 is 7.000000000000001 in doubles
  p.floor = 0.0;
  EXPECT_EQ(adakv_floor_tokens(p, 9), 0);
  p.floor = 1.0;
  EXPECT_EQ(adakv_floor_tokens(p, 40), 32);
}

// DuoAttention's default: the first ceil(R x all) kv heads, layer-major; heads= replaces it.
TEST(DuoHeads, DefaultIsTheFirstCeilRHeadsAndHeadsReplacesIt) {
  DuoParams p;
  p.retrieval = 0.3;  // ceil(0.3 x 8) = 3: layer 0's two heads and layer 1's first
  std::vector<bool> got;
  for (int l = 0; l < 4; ++l) {
    for (int h = 0; h < 2; ++h) got.push_back(duo_is_retrieval(p, l, h, 4, 2));
  }
  EXPECT_EQ(got, (std::vector<bool>{true, true, true, false, false, false, false, false}));
  p.retrieval = 0.25;  // exactly 2
  EXPECT_FALSE(duo_is_retrieval(p, 1, 0, 4, 2));
  p.heads = {3, 6};
  EXPECT_TRUE(duo_is_retrieval(p, 1, 1, 4, 2));
  EXPECT_TRUE(duo_is_retrieval(p, 3, 0, 4, 2));
  EXPECT_FALSE(duo_is_retrieval(p, 0, 0, 4, 2));
}

TEST(PolicySpec, XkvLayersAndLeanKvStaticParameters) {
  EXPECT_EQ(make_policy("xkv:layers=12/40/0/7,window=4")->name(), "xkv:layers=12/40/0/7,window=4,pool=7");
  EXPECT_EQ(make_policy("xkv:layers=5")->name(), "xkv:layers=5,window=8,pool=7");
  EXPECT_EQ(make_policy("xkv:window=100,layers=5")->name(), "xkv:layers=5,window=100,pool=7");  // no budget to exceed
  EXPECT_EQ(make_policy("xkv")->name(), "xkv:budget=64,window=8,pool=7");
  EXPECT_EQ(make_policy("leankv:window=4,static_low=5,static_high=3")->name(),
            "leankv:static_high=3,static_low=5,window=4,high_k=8,high_v=4,low_k=4,low_v=2");
  EXPECT_EQ(make_policy("leankv:static_high=0,static_low=0")->name(),
            "leankv:static_high=0,static_low=0,window=64,high_k=8,high_v=4,low_k=4,low_v=2");
  const std::string list_error = "policy 'xkv': parameter 'layers' needs numbers separated by '/', got ";
  EXPECT_NE(message("xkv:layers=").find(list_error + "''"), std::string::npos) << message("xkv:layers=");
  EXPECT_NE(message("xkv:layers=3/x").find(list_error + "'3/x'"), std::string::npos);
  EXPECT_NE(message("xkv:layers=3//4").find(list_error + "'3//4'"), std::string::npos);
  EXPECT_NE(message("xkv:layers=3/4/").find(list_error + "'3/4/'"), std::string::npos);
  EXPECT_NE(message("xkv:layers=3/1.5").find("'layers' must be integers, got 3/1.5"), std::string::npos);
  EXPECT_NE(message("xkv:layers=3/-1").find("'layers' entry = -1 is outside [0, "), std::string::npos);
  EXPECT_NE(message("xkv:layers=3/4,retention=0.5").find("policy 'xkv': layers and retention exclude each other"),
            std::string::npos);
  EXPECT_NE(message("xkv:budget=3/4").find("policy 'xkv': parameter 'budget' needs a number, got '3/4'"),
            std::string::npos);
  EXPECT_NE(message("leankv:static_high=3").find("policy 'leankv': static_high and static_low are set together"),
            std::string::npos);
  EXPECT_NE(message("leankv:static_low=-2").find("'static_low' = -2 is outside [-1, "), std::string::npos);
}

TEST(EvictionRules, TopPositionsBreaksTiesTowardTheOlderPosition) {
  const std::vector<float> s = {0.1f, 0.5f, 0.5f, 0.3f, 0.9f, 0.5f};
  EXPECT_EQ(top_positions(s, 6, 3), (Positions{1, 2, 4}));
  EXPECT_EQ(top_positions(s, 4, 2), (Positions{1, 2}));  // only the first 4 are candidates
  EXPECT_EQ(top_positions(s, 6, 0), Positions{});
  EXPECT_EQ(top_positions(s, 3, 9), (Positions{0, 1, 2}));
}

TEST(EvictionRules, MaxPoolIsCentredAndClippedAtTheEnds) {
  const std::vector<float> s = {1, 0, 0, 0, 5, 0, 0};
  EXPECT_EQ(max_pool(s, 3), (std::vector<float>{1, 1, 0, 5, 5, 5, 0}));
  EXPECT_EQ(max_pool(s, 1), s);
  EXPECT_EQ(max_pool(s, 7), (std::vector<float>{1, 5, 5, 5, 5, 5, 5}));  // 0 sees 0..3 only
}

TEST(EvictionRules, StreamingKeepsSinksAndWindow) {
  const auto p = make_streaming_policy(2, 3);
  const PromptScores none{};
  EXPECT_EQ(p->select_prompt(0, 4, none), (Positions{0, 1, 2, 3}));
  EXPECT_EQ(p->select_prompt(0, 5, none), (Positions{0, 1, 2, 3, 4}));
  EXPECT_EQ(p->select_prompt(0, 9, none), (Positions{0, 1, 6, 7, 8}));
  // Full (5 tokens): the oldest non-sink goes, wherever it sits in walk order.
  const std::vector<LiveToken> live = {{0, 0}, {8, 0}, {1, 0}, {6, 0}, {7, 0}};
  EXPECT_EQ(p->select_victim(0, live, 9), std::optional<std::size_t>(3));
  EXPECT_EQ(p->select_victim(0, std::span(live).first(4), 9), std::nullopt);
}

TEST(EvictionRules, H2oKeepsRecentWindowAndHeavyHitters) {
  const auto p = make_h2o_policy(4, 0.5);  // 2 recent, 2 heavy
  const std::vector<float> all = {0.9f, 0.1f, 0.4f, 0.4f, 0.2f, 0.0f, 0.0f};
  EXPECT_EQ(p->select_prompt(0, 4, PromptScores{all, {}}), (Positions{0, 1, 2, 3}));
  // Candidates 0..4 (5 and 6 are recent): 0 (0.9), then 2 and 3 tie at 0.4 -> 2.
  EXPECT_EQ(p->select_prompt(0, 7, PromptScores{all, {}}), (Positions{0, 2, 5, 6}));
  EXPECT_TRUE(p->accumulates_scores());
  // Adding position 7: positions >= 6 are recent. Lowest score outside them: 0.3 at 2 and 5 -> 2.
  const std::vector<LiveToken> live = {{0, 2.0f}, {5, 0.3f}, {2, 0.3f}, {6, 0.0f}};
  EXPECT_EQ(p->select_victim(0, live, 7), std::optional<std::size_t>(2));
  EXPECT_EQ(p->select_victim(0, std::span(live).first(3), 7), std::nullopt);  // under budget
  // recent = 0 still protects the token being added (at least one recent position).
  const auto r0 = make_h2o_policy(2, 0.0);
  EXPECT_EQ(r0->select_prompt(0, 5, PromptScores{all, {}}), (Positions{0, 4}));
}

TEST(EvictionRules, SnapKvPoolsTheWindowVotesOverTheOlderTokens) {
  const auto p = make_snapkv_policy(4, 2, 3);  // keep 2 window tokens + 2 voted
  EXPECT_EQ(p->observation_window(), 2);
  EXPECT_FALSE(p->accumulates_scores());
  //                          0     1     2     3     4     5     6  (5, 6: the window)
  const std::vector<float> win = {0.0f, 0.0f, 0.6f, 0.0f, 0.0f, 0.9f, 0.9f};
  const std::vector<float> all = {9.0f, 9.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};  // ignored: SnapKV votes by window
  // Pooled over 0..4 with width 3: {0, .6, .6, .6, 0}: positions 1, 2 (ties to the older).
  EXPECT_EQ(p->select_prompt(0, 7, PromptScores{all, win}), (Positions{1, 2, 5, 6}));
  EXPECT_EQ(p->select_prompt(0, 4, PromptScores{all, win}), (Positions{0, 1, 2, 3}));
  const std::vector<LiveToken> live(10, LiveToken{});
  EXPECT_EQ(p->select_victim(0, live, 20), std::nullopt);  // never evicts while decoding
}

TEST(EvictionRules, PyramidBudgetsFallLinearlyAroundTheMean) {
  // Last layer max(window + 1, 64 / 20) = 9, first 2 * 64 - 9 = 119, interpolated between.
  EXPECT_EQ(pyramid_budgets(64, 20, 8, 4, 500), (std::vector<std::int64_t>{119, 82, 46, 9}));
  EXPECT_EQ(pyramid_budgets(64, 20, 8, 4, 119), (std::vector<std::int64_t>{119, 82, 46, 9}));
  EXPECT_EQ(pyramid_budgets(10, 2, 2, 2, 40), (std::vector<std::int64_t>{15, 5}));
  EXPECT_EQ(pyramid_budgets(64, 20, 8, 1, 500), (std::vector<std::int64_t>{64}));
  // A first layer wider than the prompt is capped at it, and what it cannot hold goes to the
  // deeper layers: first 100, last 2 * 64 - 100 = 28, the total still 4 * 64 = 256.
  EXPECT_EQ(pyramid_budgets(64, 20, 8, 4, 100), (std::vector<std::int64_t>{100, 76, 52, 28}));
  // A prompt within the mean budget is not compressed in any layer (as SnapKV and XKV).
  EXPECT_EQ(pyramid_budgets(64, 20, 8, 4, 64), (std::vector<std::int64_t>{64, 64, 64, 64}));
  EXPECT_EQ(pyramid_budgets(64, 20, 8, 4, 30), (std::vector<std::int64_t>{30, 30, 30, 30}));
  // Whatever the shape: no layer above the prompt, none below the window + 1 (when the prompt
  // allows), never rising with depth, and the layers together hold layers * mean tokens (up to
  // rounding and the window floor) whenever the prompt is longer than the mean.
  for (const std::int64_t mean : {9, 16, 32, 64, 128}) {
    for (const double ratio : {1.5, 2.0, 7.0, 20.0}) {
      for (const std::int32_t layers : {2, 3, 4, 32}) {
        for (const std::int64_t prompt : {mean - 1, mean, mean + 1, 2 * mean - 3, 2 * mean, 5 * mean}) {
          const std::int64_t window = 8;
          const auto b = pyramid_budgets(mean, ratio, window, layers, prompt);
          const std::string at = fmt::format("mean {} ratio {} layers {} prompt {}", mean, ratio, layers, prompt);
          ASSERT_EQ(b.size(), static_cast<std::size_t>(layers)) << at;
          std::int64_t total = 0;
          for (std::size_t l = 0; l < b.size(); ++l) {
            EXPECT_LE(b[l], prompt) << at << " layer " << l;
            EXPECT_GE(b[l], std::min(prompt, window + 1)) << at << " layer " << l;
            if (l > 0) {
              EXPECT_LE(b[l], b[l - 1]) << at << " layer " << l;
            }
            total += b[l];
          }
          if (prompt <= mean) {
            EXPECT_EQ(total, layers * prompt) << at;
          } else {
            EXPECT_LE(std::abs(total - layers * mean), layers) << at;
          }
        }
      }
    }
  }
  // Each layer selects as SnapKV does with its own budget.
  const auto p = make_policy("pyramidkv:budget=4,ratio=2,window=1,pool=1");
  const std::vector<float> win = {0.5f, 0.1f, 0.9f, 0.3f, 0.2f, 0.0f};
  // Budgets {6, 2}: layer 0 keeps all 6, layer 1 the window (5) and the best older token (2).
  EXPECT_EQ(p->select_prompt(0, 6, PromptScores{win, win, 2}), (Positions{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(p->select_prompt(1, 6, PromptScores{win, win, 2}), (Positions{2, 5}));
}

TEST(EvictionRules, LeanKvPromptTiersCompareSignificanceWithAlphaOverIndex) {
  const auto p = make_policy("leankv:alpha_h=1,alpha_l=0.2,window=2");
  // Significance = column sum / (6 - j); thresholds alpha / (j + 1).
  //   0: 6/6 = 1 >= 1 high;  1: .5/5 = .1 >= .2/2 low (boundary);  2: .3/4 = .075 >= .2/3 low;
  //   3: .05/3 < .2/4 dropped;  4, 5: the recent window, high whatever their scores.
  const std::vector<float> all = {6.0f, 0.5f, 0.3f, 0.05f, 0.0f, 0.0f};
  const PromptSelection t = p->select_prompt_tiers(0, 6, PromptScores{all, {}});
  EXPECT_EQ(t.high, (Positions{0, 4, 5}));
  EXPECT_EQ(t.low, (Positions{1, 2}));
  EXPECT_EQ(p->select_prompt(0, 6, PromptScores{all, {}}), (Positions{0, 1, 2, 4, 5}));
  EXPECT_EQ(p->tiers().size(), 2u);
  EXPECT_EQ(kv_tier_name(p->tiers()[0]), kv_tier_name({int_format(per_token(8)), int_format(per_token(4))}));
  EXPECT_EQ(kv_tier_name(p->tiers()[1]), kv_tier_name({int_format(per_token(4)), int_format(per_token(2))}));
}

TEST(EvictionRules, LeanKvAlgorithmOneCandidateAndVictim) {
  const auto p = make_policy("leankv:alpha_h=1,alpha_l=0.2,window=2");
  // Position 10 joins: N = 11, thresholds 1/11 = .0909 and .2/11 = .0182; the candidate is 8.
  // Significance = score / (10 - position).
  std::vector<LiveToken> live = {{0, 5.0f, 0}, {3, 0.5f, 0}, {8, 1.0f, 0}, {9, 0.1f, 0}, {5, 0.2f, 1}};
  // Candidate .5: stays high; the least significant high token at or before 8 is 3 (.071): moved.
  StepDecision d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.demote, std::optional<std::size_t>(1));
  EXPECT_EQ(d.evict, std::nullopt);
  // Victim below alpha_l / N: dropped instead.
  live[1].score = 0.1f;  // .014
  d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.evict, std::optional<std::size_t>(1));
  EXPECT_EQ(d.demote, std::nullopt);
  // Candidate .05: moved to low; the low victim 5 (.04) is significant enough to stay...
  live[1].score = 0.5f;
  live[2].score = 0.1f;
  d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.demote, std::optional<std::size_t>(2));
  EXPECT_EQ(d.evict, std::nullopt);
  // ...unless it falls under alpha_l / N (.01).
  live[4].score = 0.05f;
  d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.demote, std::optional<std::size_t>(2));
  EXPECT_EQ(d.evict, std::optional<std::size_t>(4));
  // Candidate .005: dropped.
  live[2].score = 0.01f;
  d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.evict, std::optional<std::size_t>(2));
  EXPECT_EQ(d.demote, std::nullopt);
  // No candidate yet (position 1 < window), or a candidate already low: nothing.
  EXPECT_EQ(p->decide_step(0, live, 1).evict, std::nullopt);
  live[2].tier = 1;
  d = p->decide_step(0, live, 10);
  EXPECT_EQ(d.evict, std::nullopt);
  EXPECT_EQ(d.demote, std::nullopt);
}

TEST(ResidualPolicies, KiviSplitsThePromptIntoWholeGroupsAndFlushesAFullResidual) {
  const auto p = make_policy("kivi2:group=16,residual=32");
  EXPECT_EQ(p->residual_tokens(), 32);
  EXPECT_FALSE(p->evicts());
  EXPECT_TRUE(p->selects_prompt());
  EXPECT_FALSE(p->swappable());
  ASSERT_EQ(p->tiers().size(), 2U);
  EXPECT_EQ(kv_tier_name(p->tiers()[0]), kv_tier_name(KvTier{fp16_format(), fp16_format()}));
  EXPECT_EQ(kv_format_name(p->tiers()[1].key), "int2/channel-G16");
  EXPECT_EQ(kv_format_name(p->tiers()[1].value), "int2/token");
  // 37 prompt tokens: 32 quantized (two groups), 5 in the residual.
  const PromptSelection s = p->select_prompt_tiers(0, 37, PromptScores{});
  ASSERT_EQ(s.low.size(), 32U);
  EXPECT_EQ(s.low.front(), 0);
  EXPECT_EQ(s.low.back(), 31);
  EXPECT_EQ(s.high, (Positions{32, 33, 34, 35, 36}));
  // Flush exactly when the residual (tier 0) holds n_r tokens, and never evict.
  std::vector<LiveToken> live;
  for (int i = 0; i < 16; ++i) live.push_back({i, 0.0f, 1});
  for (int i = 16; i < 47; ++i) live.push_back({i, 0.0f, 0});
  EXPECT_FALSE(p->decide_step(0, live, 47).flush);  // 31 residual tokens
  live.push_back({47, 0.0f, 0});
  const StepDecision d = p->decide_step(0, live, 48);
  EXPECT_TRUE(d.flush);
  EXPECT_FALSE(d.evict.has_value());
  EXPECT_FALSE(d.demote.has_value());
}

TEST(ResidualPolicies, MiniKvKeepsHeavyHittersAndARecentWindowOnce) {
  // 10 tokens, budget 4 with half recent: 8 and 9, then the two heaviest of 0..7 (ties: older).
  const std::vector<float> all = {0.5f, 0.1f, 0.9f, 0.2f, 0.5f, 0.0f, 0.3f, 0.1f, 0.0f, 0.0f};
  EXPECT_EQ(minikv_select(all, 10, 4, 0.5), (Positions{0, 2, 8, 9}));
  EXPECT_EQ(minikv_select(all, 10, 4, 0.0), (Positions{0, 2, 4, 9}));  // at least one recent
  EXPECT_EQ(minikv_select(all, 3, 4, 0.5), (Positions{0, 1, 2}));
  const auto p = make_policy("minikv:budget=20,group=16,residual=16");
  EXPECT_TRUE(p->evicts());
  EXPECT_EQ(kv_format_name(p->tiers()[1].value), "int2/group-g16");
  // 20 kept of 40: 16 quantized, 4 in the residual (the 4 most recent of the kept ones).
  std::vector<float> scores(40, 0.0f);
  const PromptSelection s = p->select_prompt_tiers(0, 40, PromptScores{scores, {}, 1});
  EXPECT_EQ(s.low.size(), 16U);
  EXPECT_EQ(s.high, (Positions{36, 37, 38, 39}));
}

TEST(ResidualPolicies, SpecsNameWhatIsWrong) {
  EXPECT_NE(message("kivi2:group=24").find("group must be 16, 32 or 128"), std::string::npos);
  EXPECT_NE(message("kivi4:group=32,residual=48").find("residual must be a multiple of group (32)"),
            std::string::npos);
  EXPECT_NE(message("minikv:pyramid=0.5").find("'pyramid' = 0.5 is outside"), std::string::npos);
  EXPECT_EQ(make_policy("fp8")->tiers().size(), 1U);
  EXPECT_TRUE(make_policy("fp8")->swappable());
}

}  // namespace
}  // namespace kvcheck
