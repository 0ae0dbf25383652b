// The embedded default model (datasets/models/kvcheck-tiny) through `kvcheck eval` with every
// default, as a user runs it on a fresh machine: the held-out perplexity must stay at least 5x
// below the unigram perplexity of the same tokens (a model that has learnt English, and a forward
// pass that still computes what it was trained to compute). Three documents keep it fast.
//
// Retrieval: the committed checkpoint copies a passkey from far back in its context (the first
// retrieval skill it learnt; key-value and needle retrieval are still weak, see datasets/README.md).
// A regression guard on a stratified subset (every task x length group): passkey exact match at
// least 80%. Raise it as the model improves, never lower it without saying why.
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

TEST(EmbeddedModel, RetrievesPasskeysFromFarBack) {
  testing::TempDir dir;
  const auto out = dir / "eval.json";
  // 36 items: 3 of each (task, length bucket) group, lengths 128 .. 512.
  const testing::CliRun run =
      testing::run_kvcheck("eval --quiet --task retrieval --limit 36 --json " + testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const auto r = nlohmann::json::parse(testing::read_file(out));
  const auto& passkey = r.at("retrieval").at("by_task").at("passkey");
  EXPECT_EQ(passkey.at("total").get<int>(), 12);
  EXPECT_GE(passkey.at("accuracy").get<double>(), 0.8) << r.at("retrieval").at("by_task").dump();
}

}  // namespace
}  // namespace kvcheck
