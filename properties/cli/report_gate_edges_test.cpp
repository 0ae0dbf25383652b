// The report's regression gate (cli/report_baseline.h) at each tolerance's edge: a value 1% of
// the tolerance inside it passes, 1% outside fails, for every metric, and the allowed value is
// the hand-computed one. A tolerance made looser (or tighter) by more than 1% fails here, as does
// a change to the defaults or to the tolerances the committed baseline states.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "cli/report_baseline.h"
#include "properties/support/test_support.h"

namespace kvcheck::cli {
namespace {

BaselineRow row(double kl, double ppl, std::optional<double> acc, std::int64_t n) {
  BaselineRow r;
  r.policy = "p";
  r.kl_mean = kl;
  r.perplexity_ratio = ppl;
  r.retrieval_accuracy = acc;
  r.retrieval_items = n;
  return r;
}

// The metrics the gate flags for `now` against the one-row baseline `base`.
std::vector<std::string> flagged(const BaselineRow& base, const BaselineRow& now, std::vector<Regression>* out = nullptr) {
  ReportBaseline b;  // default tolerances
  b.rows = {base};
  const std::vector<Regression> r = compare_to_baseline(b, {now});
  if (out) *out = r;
  std::vector<std::string> names;
  for (const Regression& x : r) names.push_back(x.metric);
  return names;
}

using Names = std::vector<std::string>;

TEST(ReportGateEdges, DefaultTolerancesAreTheDocumentedOnes) {
  const BaselineTolerances t;
  EXPECT_EQ(t.kl_rel, 0.05);
  EXPECT_EQ(t.kl_abs, 1e-7);
  EXPECT_EQ(t.ppl_rel, 0.005);
  EXPECT_EQ(t.accuracy_sigmas, 2.0);
  // And the committed baseline the gate runs against states the same.
  const ReportBaseline committed =
      load_report_baseline(testing::source_path("datasets/baselines/report-quick-kvcheck-tiny.json").string());
  EXPECT_EQ(committed.tolerances.kl_rel, t.kl_rel);
  EXPECT_EQ(committed.tolerances.kl_abs, t.kl_abs);
  EXPECT_EQ(committed.tolerances.ppl_rel, t.ppl_rel);
  EXPECT_EQ(committed.tolerances.accuracy_sigmas, t.accuracy_sigmas);
}

TEST(ReportGateEdges, KlMeanRelativeTolerance) {
  // Allowed: 0.02 (1 + 0.05) + 1e-7; the tolerance's width w = 0.0010001.
  const double w = 0.02 * 0.05 + 1e-7;
  std::vector<Regression> r;
  EXPECT_EQ(flagged(row(0.02, 1, {}, 0), row(0.02 + 0.99 * w, 1, {}, 0)), Names{});
  EXPECT_EQ(flagged(row(0.02, 1, {}, 0), row(0.02 + 1.01 * w, 1, {}, 0), &r), Names{"kl_mean"});
  EXPECT_NEAR(r.at(0).allowed, 0.0210001, 1e-15);
}

TEST(ReportGateEdges, KlMeanAbsoluteFloor) {
  // A baseline KL of 0 (a lossless policy): only kl_abs = 1e-7 is allowed.
  EXPECT_EQ(flagged(row(0, 1, {}, 0), row(0.99e-7, 1, {}, 0)), Names{});
  EXPECT_EQ(flagged(row(0, 1, {}, 0), row(1.01e-7, 1, {}, 0)), Names{"kl_mean"});
}

TEST(ReportGateEdges, PerplexityRatioRelativeTolerance) {
  const double w = 1.05 * 0.005;  // allowed 1.05525
  std::vector<Regression> r;
  EXPECT_EQ(flagged(row(0, 1.05, {}, 0), row(0, 1.05 + 0.99 * w, {}, 0)), Names{});
  EXPECT_EQ(flagged(row(0, 1.05, {}, 0), row(0, 1.05 + 1.01 * w, {}, 0), &r), Names{"perplexity_ratio"});
  EXPECT_NEAR(r.at(0).allowed, 1.05525, 1e-14);
}

// The tolerances are inclusive: a value exactly at the allowed one passes (computed the way the
// gate computes it, so the comparison is of equal doubles).
TEST(ReportGateEdges, ExactlyAtTheToleranceIsInside) {
  const BaselineTolerances t;
  EXPECT_EQ(flagged(row(0.02, 1, {}, 0), row(0.02 * (1.0 + t.kl_rel) + t.kl_abs, 1, {}, 0)), Names{});
  EXPECT_EQ(flagged(row(0, 1.05, {}, 0), row(0, 1.05 * (1.0 + t.ppl_rel), {}, 0)), Names{});
}

TEST(ReportGateEdges, RetrievalBinomialTolerance) {
  // p = 0.5 over n = 48 items: 2 sigma = 2 sqrt(0.25 / 48) = 0.14433756729740643 (above 1/48).
  const double w = 2.0 * std::sqrt(0.25 / 48.0);
  std::vector<Regression> r;
  EXPECT_EQ(flagged(row(0, 1, 0.5, 48), row(0, 1, 0.5 - 0.99 * w, 48)), Names{});
  EXPECT_EQ(flagged(row(0, 1, 0.5, 48), row(0, 1, 0.5 - 1.01 * w, 48), &r), Names{"retrieval_accuracy"});
  EXPECT_NEAR(r.at(0).allowed, 0.35566243270259357, 1e-14);
  // p = 0.9 over n = 100: 2 sqrt(0.09 / 100) = 0.06.
  EXPECT_EQ(flagged(row(0, 1, 0.9, 100), row(0, 1, 0.9 - 0.99 * 0.06, 100)), Names{});
  EXPECT_EQ(flagged(row(0, 1, 0.9, 100), row(0, 1, 0.9 - 1.01 * 0.06, 100), &r), Names{"retrieval_accuracy"});
  EXPECT_NEAR(r.at(0).allowed, 0.84, 1e-14);
}

TEST(ReportGateEdges, RetrievalOneItemFloor) {
  // p = 1 has no binomial spread: one item of n = 12 is still allowed (1/12), a bit more is not.
  EXPECT_EQ(flagged(row(0, 1, 1.0, 12), row(0, 1, 1.0 - 0.99 / 12.0, 12)), Names{});
  EXPECT_EQ(flagged(row(0, 1, 1.0, 12), row(0, 1, 1.0 - 1.01 / 12.0, 12)), Names{"retrieval_accuracy"});
}

TEST(ReportGateEdges, OracleViolationsHaveNoTolerance) {
  BaselineRow now = row(0, 1, {}, 0);
  EXPECT_EQ(flagged(row(0, 1, {}, 0), now), Names{});
  now.oracle_violations = 1;
  EXPECT_EQ(flagged(row(0, 1, {}, 0), now), Names{"oracle_violations"});
}

}  // namespace
}  // namespace kvcheck::cli
