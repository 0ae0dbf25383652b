// The embedded default model (datasets/models/kvcheck-tiny) through `kvcheck eval` with every
// default, as a user runs it on a fresh machine: the held-out perplexity must stay at least 5x
// below the unigram perplexity of the same tokens (a model that has learnt English, and a forward
// pass that still computes what it was trained to compute). Three documents keep it fast.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

TEST(EmbeddedModel, PerplexityFiveTimesBelowUnigram) {
  testing::TempDir dir;
  const auto out = dir / "eval.json";
  const testing::CliRun run = testing::run_kvcheck("eval --quiet --task ppl --limit 3 --json " + testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const auto r = nlohmann::json::parse(testing::read_file(out));
  const double ppl = r.at("perplexity").get<double>();
  const double unigram = r.at("unigram_perplexity").get<double>();
  EXPECT_GT(r.at("ppl").at("predicted_tokens").get<double>(), 5000);
  EXPECT_LT(ppl * 5, unigram) << "perplexity " << ppl << ", unigram " << unigram;
  EXPECT_GT(ppl, 1.0);
}

}  // namespace
}  // namespace kvcheck
