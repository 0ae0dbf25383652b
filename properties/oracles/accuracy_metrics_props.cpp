// Properties of the accuracy metrics on random logits rows: KL >= 0, KL(P||P) = 0, KL invariant
// under adding a constant to either row, identical rows agree on their top token, a row's NLLs
// give probabilities that sum to 1. Reproduce with RC_PARAMS="seed=...".
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "oracles/accuracy_metrics.h"

namespace kvcheck {
namespace {

// Logits of a random vocabulary size (1 .. 300) with a random spread (up to +-30).
std::vector<double> gen_row(std::size_t vocab) {
  const double spread = *rc::gen::inRange(1, 31);
  const auto ints = *rc::gen::container<std::vector<int>>(vocab, rc::gen::inRange(-1000, 1001));
  std::vector<double> row(vocab);
  for (std::size_t i = 0; i < vocab; ++i) row[i] = spread * ints[i] / 1000.0;
  return row;
}

std::size_t gen_vocab() { return static_cast<std::size_t>(*rc::gen::inRange(1, 301)); }

RC_GTEST_PROP(AccuracyMetricsProps, KlIsNonNegativeAndZeroOnItself, ()) {
  const std::size_t v = gen_vocab();
  const std::vector<double> p = gen_row(v);
  const std::vector<double> q = gen_row(v);
  RC_ASSERT(kl_divergence(std::span<const double>(p), std::span<const double>(q)) >= 0.0);
  RC_ASSERT(kl_divergence(std::span<const double>(p), std::span<const double>(p)) < 1e-14);
}

RC_GTEST_PROP(AccuracyMetricsProps, KlIsInvariantToAConstantAddedToTheLogits, ()) {
  const std::size_t v = gen_vocab();
  const std::vector<double> p = gen_row(v);
  const std::vector<double> q = gen_row(v);
  const double a = *rc::gen::inRange(-500, 501) / 7.0;
  const double b = *rc::gen::inRange(-500, 501) / 3.0;
  std::vector<double> p2 = p;
  std::vector<double> q2 = q;
  for (double& x : p2) x += a;
  for (double& x : q2) x += b;
  const double kl = kl_divergence(std::span<const double>(p), std::span<const double>(q));
  const double kl2 = kl_divergence(std::span<const double>(p2), std::span<const double>(q2));
  RC_ASSERT(std::fabs(kl - kl2) <= 1e-12 + 1e-9 * kl);
}

RC_GTEST_PROP(AccuracyMetricsProps, IdenticalRowsAgreeOnTheirTopToken, ()) {
  const std::size_t v = gen_vocab();
  const std::vector<double> p = gen_row(v);
  std::vector<float> pf(p.begin(), p.end());
  DistributionComparison cmp;
  const int positions = *rc::gen::inRange(1, 5);
  for (int i = 0; i < positions; ++i) cmp.add(std::span<const float>(pf), std::span<const float>(pf));
  const DistributionSummary s = cmp.summary();
  RC_ASSERT(s.top1_agreement == 1.0);
  RC_ASSERT(s.kl_max == 0.0);
  RC_ASSERT(s.rms_delta_p == 0.0);
}

RC_GTEST_PROP(AccuracyMetricsProps, ProbabilitiesFromNllSumToOne, ()) {
  const std::size_t v = gen_vocab();
  const std::vector<double> p = gen_row(v);
  double total = 0.0;
  for (std::size_t t = 0; t < v; ++t) total += std::exp(-token_nll(std::span<const double>(p), static_cast<std::int32_t>(t)));
  RC_ASSERT(std::fabs(total - 1.0) < 1e-12);
}

RC_GTEST_PROP(AccuracyMetricsProps, PercentilesAreOrderedAndBounded, ()) {
  const auto ints = *rc::gen::nonEmpty(rc::gen::container<std::vector<int>>(rc::gen::inRange(-100, 101)));
  const std::vector<double> values(ints.begin(), ints.end());
  double last = percentile(values, 0.0);
  RC_ASSERT(last == *std::min_element(values.begin(), values.end()));
  for (const double p : {50.0, 90.0, 95.0, 99.0, 99.9, 100.0}) {
    const double x = percentile(values, p);
    RC_ASSERT(x >= last);
    last = x;
  }
  RC_ASSERT(last == *std::max_element(values.begin(), values.end()));
}

}  // namespace
}  // namespace kvcheck
