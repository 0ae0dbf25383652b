// Accuracy metrics against values computed by hand: uniform and two-token distributions with a
// closed-form KL, percentiles and standard error of small known lists, unigram perplexities.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "oracles/accuracy_metrics.h"

namespace kvcheck {
namespace {

constexpr double kTol = 1e-12;  // double arithmetic on a handful of terms

std::span<const float> f(const std::vector<float>& v) { return v; }
std::span<const double> d(const std::vector<double>& v) { return v; }

TEST(AccuracyMetrics, UniformLogitsHaveZeroKlAndPerplexityEqualToTheVocabulary) {
  const std::vector<float> uniform(7, 0.25f);
  EXPECT_EQ(kl_divergence(f(uniform), f(uniform)), 0.0);
  double nll = 0.0;
  for (std::int32_t t = 0; t < 7; ++t) nll += token_nll(f(uniform), t);
  EXPECT_NEAR(nll / 7.0, std::log(7.0), kTol);
  EXPECT_NEAR(perplexity(nll, 7), 7.0, 1e-11);
}

TEST(AccuracyMetrics, TwoTokenKlHasItsClosedForm) {
  // p = (1/4, 3/4), q = (1/2, 1/2): KL(p||q) = 1/4 log(1/2) + 3/4 log(3/2).
  const std::vector<double> p{0.0, std::log(3.0)};
  const std::vector<double> q{5.0, 5.0};
  EXPECT_NEAR(kl_divergence(d(p), d(q)), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), kTol);
  // KL(q||p) = 1/2 log(2) + 1/2 log(2/3).
  EXPECT_NEAR(kl_divergence(d(q), d(p)), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), kTol);
}

TEST(AccuracyMetrics, LogSoftmaxIsStableForHugeLogits) {
  // p = (1/2, 1/2), q = (1, e^-1000): KL = log(1/2) + 500 exactly; a naive exp() overflows.
  const std::vector<double> p{1000.0, 1000.0};
  const std::vector<double> q{1000.0, 0.0};
  EXPECT_NEAR(kl_divergence(d(p), d(q)), std::log(0.5) + 500.0, 1e-9);
  EXPECT_NEAR(token_nll(d(q), 1), 1000.0, 1e-9);
  const std::vector<double> lp = log_softmax(d(p));
  EXPECT_NEAR(lp[0], std::log(0.5), kTol);
}

TEST(AccuracyMetrics, MassOnATokenTheOtherExcludesGivesInfiniteKl) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> p{0.0, 0.0};
  const std::vector<double> q{0.0, -inf};
  EXPECT_EQ(kl_divergence(d(p), d(q)), inf);
  EXPECT_NEAR(kl_divergence(d(q), d(p)), std::log(2.0), kTol);  // p_ref = 0 terms contribute 0
}

TEST(AccuracyMetrics, NanPropagatesAndNeverAgrees) {
  const std::vector<float> p{0.0f, 1.0f};
  const std::vector<float> bad{0.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(std::isnan(kl_divergence(f(p), f(bad))));
  EXPECT_EQ(top_token(f(bad)), -1);
  const PositionComparison c = compare_position(f(bad), f(bad));
  EXPECT_FALSE(c.same_top);
  EXPECT_TRUE(std::isnan(c.delta_p));
}

TEST(AccuracyMetrics, MisuseThrows) {
  const std::vector<float> a{0.0f, 1.0f};
  const std::vector<float> b{0.0f, 1.0f, 2.0f};
  EXPECT_THROW(kl_divergence(f(a), f(b)), std::invalid_argument);
  EXPECT_THROW(token_nll(f(a), 2), std::invalid_argument);
  EXPECT_THROW(token_nll(f(a), -1), std::invalid_argument);
  EXPECT_THROW(perplexity(1.0, 0), std::invalid_argument);
  EXPECT_THROW(unigram_perplexity({}), std::invalid_argument);
  EXPECT_THROW(percentile({}, 50.0), std::invalid_argument);
  const std::vector<double> one{1.0};
  EXPECT_THROW(percentile(one, 101.0), std::invalid_argument);
  EXPECT_THROW(DistributionComparison().summary(), std::invalid_argument);
}

TEST(AccuracyMetrics, TopTokenBreaksTiesByLowestIndex) {
  const std::vector<float> row{1.0f, 3.0f, 3.0f, 0.0f};
  EXPECT_EQ(top_token(f(row)), 1);
  const std::vector<double> flat(5, -2.0);
  EXPECT_EQ(top_token(d(flat)), 0);
}

TEST(AccuracyMetrics, TokenNllOfATwoTokenDistribution) {
  const std::vector<float> row{0.0f, static_cast<float>(std::log(3.0))};
  EXPECT_NEAR(token_nll(f(row), 0), std::log(4.0), 1e-7);  // the float logit carries ~1e-8 error
  EXPECT_NEAR(token_nll(f(row), 1), std::log(4.0 / 3.0), 1e-7);
}

TEST(AccuracyMetrics, UnigramPerplexityOfKnownSequences) {
  EXPECT_NEAR(unigram_perplexity(std::vector<std::int32_t>{5, 5, 5, 5}), 1.0, kTol);
  EXPECT_NEAR(unigram_perplexity(std::vector<std::int32_t>{1, 2, 3, 4}), 4.0, kTol);
  // p = (1/2, 1/4, 1/4): entropy 1.5 ln 2, perplexity 2^1.5.
  EXPECT_NEAR(unigram_perplexity(std::vector<std::int32_t>{1, 7, 1, 3}), std::pow(2.0, 1.5), kTol);
}

TEST(AccuracyMetrics, PercentilesInterpolateBetweenOrderStatistics) {
  const std::vector<double> v{3.0, 1.0, 4.0, 1.0, 5.0};  // sorted: 1 1 3 4 5
  EXPECT_EQ(percentile(v, 0.0), 1.0);
  EXPECT_EQ(percentile(v, 25.0), 1.0);   // h = 1
  EXPECT_EQ(percentile(v, 50.0), 3.0);   // h = 2
  EXPECT_NEAR(percentile(v, 90.0), 4.6, kTol);    // h = 3.6
  EXPECT_NEAR(percentile(v, 99.9), 4.996, kTol);  // h = 3.996
  EXPECT_EQ(percentile(v, 100.0), 5.0);
  const std::vector<double> even{10.0, 20.0, 30.0, 40.0};
  EXPECT_EQ(percentile(even, 50.0), 25.0);  // mean of the middle two
  const std::vector<double> single{7.0};
  EXPECT_EQ(percentile(single, 99.0), 7.0);
}

TEST(AccuracyMetrics, StandardErrorOfAKnownList) {
  // Mean 5, sample variance 32/7, standard error sqrt(32/7 / 8) = sqrt(4/7).
  const std::vector<double> v{2, 4, 4, 4, 5, 5, 7, 9};
  const MeanStderr ms = mean_and_stderr(v);
  EXPECT_NEAR(ms.mean, 5.0, kTol);
  EXPECT_NEAR(ms.stderr_of_mean, std::sqrt(4.0 / 7.0), kTol);
  EXPECT_TRUE(std::isnan(mean_and_stderr(std::vector<double>{3.0}).stderr_of_mean));
}

TEST(AccuracyMetrics, SummaryOfTwoPositions) {
  // Position 1: ref p = (1/4, 3/4), other uniform: KL closed form, tops 1 vs 0, delta_p = 1/2 - 3/4.
  // Position 2: identical rows: KL 0, same top, delta_p 0.
  const std::vector<double> p{0.0, std::log(3.0)};
  const std::vector<double> u{0.0, 0.0};
  DistributionComparison cmp;
  cmp.add(d(p), d(u));
  cmp.add(d(p), d(p));
  const DistributionSummary s = cmp.summary();
  const double kl1 = 0.25 * std::log(0.5) + 0.75 * std::log(1.5);
  EXPECT_EQ(s.positions, 2);
  EXPECT_NEAR(s.kl_mean, kl1 / 2.0, kTol);
  EXPECT_NEAR(s.kl_stderr, kl1 / 2.0, kTol);  // two values a, 0: s = a / sqrt(2), / sqrt(2)
  EXPECT_NEAR(s.kl_max, kl1, kTol);
  EXPECT_NEAR(s.kl_p50, kl1 / 2.0, kTol);
  EXPECT_NEAR(s.kl_p90, 0.9 * kl1, kTol);
  EXPECT_NEAR(s.kl_p999, 0.999 * kl1, kTol);
  EXPECT_EQ(s.top1_agreement, 0.5);
  EXPECT_NEAR(s.rms_delta_p, std::sqrt(0.0625 / 2.0), kTol);
}

TEST(AccuracyMetrics, ExactMatchAndAccuracy) {
  const std::vector<std::int32_t> a{4, 5, 6};
  EXPECT_TRUE(exact_match(a, std::vector<std::int32_t>{4, 5, 6}));
  EXPECT_FALSE(exact_match(a, std::vector<std::int32_t>{4, 5}));
  EXPECT_FALSE(exact_match(a, std::vector<std::int32_t>{4, 5, 7}));
  AccuracyCounter acc;
  EXPECT_TRUE(std::isnan(acc.accuracy()));
  acc.add(true);
  acc.add(false);
  acc.add(true);
  acc.add(true);
  EXPECT_EQ(acc.accuracy(), 0.75);
}

}  // namespace
}  // namespace kvcheck
