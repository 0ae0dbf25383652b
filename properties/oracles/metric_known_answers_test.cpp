// The report's metrics on inputs worked out by hand, with the direction and the base of every
// log spelled out: KL(P_ref ‖ P_other) in nats (natural log), not the reverse direction and not
// bits; top-1 as the reference's top token; Δp = p_other[top_ref] - p_ref[top_ref], signed, and
// its RMS over positions; perplexity = e^{mean NLL in nats}; the report's perplexity ratio
// (policy perplexity / reference perplexity).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "oracles/accuracy_metrics.h"

namespace kvcheck {
namespace {

constexpr double kTol = 1e-12;

// Logits ln(1), ln(2), ln(1): P = (1/4, 1/2, 1/4). Logits 0, 0, 0: Q = (1/3, 1/3, 1/3).
const std::vector<double> kRef = {0.0, std::log(2.0), 0.0};
const std::vector<double> kUniform3 = {0.0, 0.0, 0.0};

TEST(MetricKnownAnswers, TopkAgreementIsTheOverlapOfTheKLargest) {
  // ref ranks 3, 1, 0, 2 (logits 2, 5, 1, 9); other ranks 1, 3, 2, 0.
  const std::vector<float> ref = {2.0f, 5.0f, 1.0f, 9.0f}, other = {0.0f, 8.0f, 1.0f, 7.0f};
  EXPECT_EQ(topk_agreement(ref, other, 1), 0.0);        // 3 against 1
  EXPECT_EQ(topk_agreement(ref, other, 2), 1.0);        // {3, 1} against {1, 3}
  EXPECT_EQ(topk_agreement(ref, other, 3), 2.0 / 3.0);  // {3, 1, 0} against {1, 3, 2}
  EXPECT_EQ(topk_agreement(ref, other, 4), 1.0);
  // Equal logits rank by the lower id; NaN ranks below every number.
  const std::vector<float> tied = {1.0f, 1.0f, 1.0f, 0.0f}, nan_first = {std::nanf(""), 1.0f, 1.0f, 0.0f};
  EXPECT_EQ(topk_agreement(tied, std::vector<float>{0.0f, 0.0f, 5.0f, 0.0f}, 2), 0.5);  // {0, 1} against {2, 0}
  EXPECT_EQ(topk_agreement(nan_first, std::vector<float>{0.0f, 3.0f, 2.0f, 1.0f}, 3), 1.0);  // {1, 2, 3} both
  EXPECT_THROW(topk_agreement(ref, other, 0), std::invalid_argument);
  EXPECT_THROW(topk_agreement(ref, other, 5), std::invalid_argument);
  EXPECT_THROW(topk_agreement(ref, std::vector<float>{1.0f}, 1), std::invalid_argument);
}

TEST(MetricKnownAnswers, KlIsRefAgainstOtherInNats) {
  // KL(P ‖ Q) = 1/4 ln(3/4) + 1/2 ln(3/2) + 1/4 ln(3/4) = 1/2 ln(9/8).
  const double kl = kl_divergence(std::span<const double>(kRef), std::span<const double>(kUniform3));
  EXPECT_NEAR(kl, 0.05889151782819173, kTol);
  // Not KL(Q ‖ P) = 1/3 ln(32/27), nor the same in bits (ln(9/8) / (2 ln 2)).
  EXPECT_GT(std::fabs(kl - 0.056633012265132475), 1e-3);
  EXPECT_GT(std::fabs(kl - 0.05889151782819173 / std::log(2.0)), 1e-3);
  EXPECT_NEAR(kl_divergence(std::span<const double>(kUniform3), std::span<const double>(kRef)), 0.056633012265132475,
              kTol);
}

TEST(MetricKnownAnswers, Top1DeltaPAndTheirSummary) {
  // Position 1: P = (1/4, 1/2, 1/4) against uniform: top_ref = 1, top_other = 0 (lowest index
  // among ties): disagree; Δp = 1/3 - 1/2 = -1/6.
  const PositionComparison a = compare_position(std::span<const double>(kRef), std::span<const double>(kUniform3));
  EXPECT_FALSE(a.same_top);
  EXPECT_NEAR(a.delta_p, -1.0 / 6.0, kTol);
  // Position 2: reference uniform (top 0), other P: Δp = 1/4 - 1/3 = -1/12; tops 0 and 1.
  const PositionComparison b = compare_position(std::span<const double>(kUniform3), std::span<const double>(kRef));
  EXPECT_NEAR(b.delta_p, -1.0 / 12.0, kTol);
  // Position 3: other = P sharpened (logits 0, ln 4, 0: (1/6, 2/3, 1/6)): same top, Δp = +1/6.
  const std::vector<double> sharp = {0.0, std::log(4.0), 0.0};
  const PositionComparison c = compare_position(std::span<const double>(kRef), std::span<const double>(sharp));
  EXPECT_TRUE(c.same_top);
  EXPECT_NEAR(c.delta_p, 1.0 / 6.0, kTol);
  DistributionComparison cmp;
  for (const PositionComparison& p : {a, b, c}) cmp.add(p);
  const DistributionSummary s = cmp.summary();
  EXPECT_NEAR(s.top1_agreement, 1.0 / 3.0, kTol);
  // RMS Δp = sqrt((1/36 + 1/144 + 1/36) / 3) = sqrt(9 / 432) = sqrt(1/48).
  EXPECT_NEAR(s.rms_delta_p, std::sqrt(1.0 / 48.0), kTol);
  // KL of position 3: 1/4 ln(3/2) + 1/2 ln(3/4) + 1/4 ln(3/2) = 1/2 ln(9/8) as well.
  EXPECT_NEAR(s.kl_mean, (0.05889151782819173 + 0.056633012265132475 + 0.05889151782819173) / 3.0, kTol);
}

TEST(MetricKnownAnswers, PerplexityIsTheExponentialOfTheMeanNllInNats) {
  // Three targets each at p = 1/2 under logits (0, 0): NLL ln 2 each, perplexity 2.
  const std::vector<double> two = {0.0, 0.0};
  double nll = 0.0;
  for (int i = 0; i < 3; ++i) nll += token_nll(std::span<const double>(two), i % 2);
  EXPECT_NEAR(nll, 3.0 * std::log(2.0), kTol);
  EXPECT_NEAR(perplexity(nll, 3), 2.0, kTol);
  // The reference over four equal logits: perplexity 4; the report's ratio policy / reference is
  // then 2 / 4 = 0.5 (lower is better: the policy predicts these tokens better).
  const double ref = perplexity(3.0 * std::log(4.0), 3);
  EXPECT_NEAR(ref, 4.0, kTol);
  EXPECT_NEAR(perplexity(nll, 3) / ref, 0.5, kTol);
  // The target's log-probability under P = (1/4, 1/2, 1/4): -ln(1/4) and -ln(1/2).
  EXPECT_NEAR(token_nll(std::span<const double>(kRef), 0), std::log(4.0), kTol);
  EXPECT_NEAR(token_nll(std::span<const double>(kRef), 1), std::log(2.0), kTol);
}

}  // namespace
}  // namespace kvcheck
