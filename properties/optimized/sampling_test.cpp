// optimized/sampling.h against what sampling means: greedy at temperature 0, the softmax's
// frequencies over many seeds, the top-p nucleus cut exactly where its mass reaches top_p, and a
// draw that depends on (seed, sample, position) only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "optimized/greedy_decoding.h"
#include "optimized/sampling.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

TEST(Sampling, TemperatureZeroIsGreedy) {
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f};
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    EXPECT_EQ(sample_token(0, logits, 5, SamplingParams{0.0, 0.3, seed}, 2), greedy_token(0, logits, 5));
  }
}

// greedy_token's two vectorized passes against the one ordered loop they replace: the first
// index of the maximum, over rows of every length around the sixteen lanes, drawn from a few
// values so that ties are common (-0 and +0 among them, and the infinities); with a NaN
// anywhere, an InputError naming the first NaN's index. Seeded; the seed and row are printed.
TEST(Sampling, GreedyIsTheFirstIndexOfTheMaximum) {
  const float pool[] = {-INFINITY, -1.5f, -0.0f, 0.0f, 0.25f, 2.0f, 3.0f, INFINITY};
  std::uint64_t state = 12345;
  const auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<std::size_t>(state >> 33);
  };
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<float> row(1 + next() % 70);
    const std::size_t kinds = 2 + next() % std::size(pool);  // how many of the values this row uses
    for (float& v : row) v = pool[next() % std::min(kinds, std::size(pool))];
    std::size_t want = 0;
    for (std::size_t i = 1; i < row.size(); ++i) {
      if (row[i] > row[want]) want = i;
    }
    ASSERT_EQ(greedy_token(0, row, 0), static_cast<std::int32_t>(want)) << "trial " << trial << ", " << row.size() << " logits";
    if (trial % 3 == 0) {
      const std::size_t at = next() % row.size();
      row[at] = NAN;
      if (next() % 2 == 0) row[next() % row.size()] = NAN;  // maybe a second, before or after
      std::size_t first = 0;
      while (!std::isnan(row[first])) ++first;
      testing::expect_input_error([&] { greedy_token(7, row, 9); },
                                  {"request 7", fmt::format("logit {} at position 9 is NaN", first)});
    }
  }
}

TEST(Sampling, FrequenciesFollowTheSoftmaxAtTheTemperature) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 0.5f};
  const double t = 0.7;
  std::vector<double> want(logits.size());
  double z = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) z += want[i] = std::exp(logits[i] / t);
  const int draws = 40000;
  std::map<std::int32_t, int> seen;
  for (int k = 0; k < draws; ++k) ++seen[sample_token(0, logits, k, SamplingParams{t, 1.0, 17}, 0)];
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double p = want[i] / z;
    const double sd = std::sqrt(p * (1.0 - p) / draws);
    EXPECT_NEAR(seen[static_cast<std::int32_t>(i)] / static_cast<double>(draws), p, 5.0 * sd) << "token " << i;
  }
}

TEST(Sampling, TopPKeepsTheShortestHeadReachingItsMass) {
  // Probabilities at temperature 1: 0.5, 0.25, 0.125, 0.125 (logits as log2 multiples).
  const float l2 = static_cast<float>(std::log(2.0));
  const std::vector<float> logits = {3 * l2, 2 * l2, l2, l2};
  std::map<std::int32_t, int> seen;
  for (int k = 0; k < 4000; ++k) ++seen[sample_token(0, logits, k, SamplingParams{1.0, 0.75, 3}, 0)];
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_EQ(seen[2] + seen[3], 0) << "0.5 + 0.25 reaches top_p 0.75: the rest is cut";
  EXPECT_NEAR(seen[0] / 4000.0, 2.0 / 3.0, 0.04);
  std::map<std::int32_t, int> just_above;
  for (int k = 0; k < 4000; ++k) ++just_above[sample_token(0, logits, k, SamplingParams{1.0, 0.76, 3}, 0)];
  EXPECT_GT(just_above[2], 0) << "0.76 needs the third token";
  EXPECT_EQ(just_above[3], 0) << "ties keep the lower id first";
  for (int k = 0; k < 100; ++k) EXPECT_EQ(sample_token(0, logits, k, SamplingParams{1.0, 1e-9, 3}, 0), 0);
}

// The boundary the test above cannot pin: its probabilities come from float logits, so its running
// mass is only near 0.75. Equal logits give exact ones: four tokens of 0.25 each, and the head
// of two lands exactly on top_p 0.5 (the comparison is 2.0 against 0.5 x 4.0, both exact).
// "Reaches" means >=: the nucleus stops there, as Hugging Face's and vLLM's do (docs/design.md,
// Sampling); a `<=` in the nucleus loop would keep a third token.
TEST(Sampling, TopPStopsWhereTheMassLandsExactlyOnTopP) {
  const std::vector<float> equal = {1.5f, 1.5f, 1.5f, 1.5f};
  const auto frequencies = [&](double top_p) {
    std::map<std::int32_t, int> seen;
    for (int k = 0; k < 4000; ++k) ++seen[sample_token(0, equal, k, SamplingParams{1.0, top_p, 11}, 0)];
    return seen;
  };
  std::map<std::int32_t, int> half = frequencies(0.5);
  EXPECT_EQ(half[2] + half[3], 0) << "0.25 + 0.25 is exactly top_p 0.5: the nucleus is ids 0 and 1";
  EXPECT_NEAR(half[0] / 4000.0, 0.5, 0.04);
  std::map<std::int32_t, int> three = frequencies(0.75);
  EXPECT_GT(three[2], 0);
  EXPECT_EQ(three[3], 0) << "three tokens are exactly top_p 0.75";
  EXPECT_NEAR(three[0] / 4000.0, 1.0 / 3.0, 0.04);
  std::map<std::int32_t, int> above = frequencies(std::nextafter(0.5, 1.0));
  EXPECT_GT(above[2], 0) << "just above 0.5 needs a third token";
  EXPECT_EQ(above[3], 0);
}

TEST(Sampling, TheDrawDependsOnSeedSampleAndPositionOnly) {
  EXPECT_EQ(sampling_draw(5, 2, 40), sampling_draw(5, 2, 40));
  EXPECT_NE(sampling_draw(5, 2, 40), sampling_draw(5, 3, 40));
  EXPECT_NE(sampling_draw(5, 2, 40), sampling_draw(5, 2, 41));
  EXPECT_NE(sampling_draw(5, 2, 40), sampling_draw(6, 2, 40));
  for (int k = 0; k < 1000; ++k) {
    const double u = sampling_draw(9, k % 7, k);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(Sampling, NonFiniteLogitsNameTheRequest) {
  const std::vector<float> nan = {0.0f, NAN}, inf = {0.0f, INFINITY};
  testing::expect_input_error([&] { sample_token(7, nan, 3, SamplingParams{}, 0); }, {"request 7", "position 3"});
  testing::expect_input_error([&] { sample_token(7, inf, 3, SamplingParams{1.0, 1.0, 0}, 0); }, {"request 7", "position 3"});
}

// The stop reasons by name, as GenerationResult and the CLI print them, and the decoding rules'
// order: EOS, then the token budget, then the context.
TEST(GreedyDecoding, StopReasonsKeepTheirPrintedNames) {
  EXPECT_STREQ(stop_reason_name(StopReason::kEos), "eos");
  EXPECT_STREQ(stop_reason_name(StopReason::kMaxNewTokens), "max_new_tokens");
  EXPECT_STREQ(stop_reason_name(StopReason::kMaxPositionEmbeddings), "max_position_embeddings");
  EXPECT_STREQ(stop_reason_name(StopReason::kCancelled), "cancelled");
  EXPECT_STREQ(stop_reason_name(StopReason::kError), "error");
  ModelConfig c;
  c.eos_token_ids = {7};
  c.max_position_embeddings = 10;
  const std::vector<std::int32_t> none, eos = {7}, two = {1, 2}, three = {1, 2, 3};
  EXPECT_EQ(greedy_stop(c, 4, none, 3, true), std::nullopt);
  EXPECT_EQ(greedy_stop(c, 4, eos, 1, true), StopReason::kEos);  // EOS before the budget
  EXPECT_EQ(greedy_stop(c, 4, eos, 3, false), std::nullopt);
  EXPECT_EQ(greedy_stop(c, 8, three, 3, true), StopReason::kMaxNewTokens);  // the budget before the context
  EXPECT_EQ(greedy_stop(c, 8, two, 5, true), StopReason::kMaxPositionEmbeddings);
}

}  // namespace
}  // namespace kvcheck
