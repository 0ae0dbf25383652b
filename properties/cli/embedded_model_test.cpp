// The embedded default model (datasets/models/kvcheck-tiny) through `kvcheck eval` with every
// default, as a user runs it on a fresh machine: the held-out perplexity must stay at least 5x
// below the unigram perplexity of the same tokens (a model that has learnt English, and a forward
// pass that still computes what it was trained to compute). Three documents keep it fast.
//
// Retrieval: the committed checkpoint retrieves pass keys, needles and key-value pairs from far
// back in its context (94% of the committed set, see datasets/README.md). A regression guard on a
// stratified subset (every task x length group): each task, and the 512-token bucket, at least
// 75% exact match. Raise it as the model improves, never lower it without saying why.
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

TEST(EmbeddedModel, RetrievesFarBackTokensInEveryTask) {
  testing::TempDir dir;
  const auto out = dir / "eval.json";
  // 36 items: 3 of each (task, length bucket) group, lengths 128 .. 512. The committed model
  // answers 35 of them; the bars leave room for one or two items to flip with a retrained model.
  const testing::CliRun run =
      testing::run_kvcheck("eval --quiet --task retrieval --limit 36 --json " + testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const auto r = nlohmann::json::parse(testing::read_file(out));
  const auto& by_task = r.at("retrieval").at("by_task");
  for (const char* task : {"passkey", "needle", "kv"}) {
    EXPECT_EQ(by_task.at(task).at("total").get<int>(), 12) << task;
    EXPECT_GE(by_task.at(task).at("accuracy").get<double>(), 0.75) << task << ": " << by_task.dump();
  }
  EXPECT_GE(r.at("retrieval").at("by_length").at("512").at("accuracy").get<double>(), 0.75)
      << r.at("retrieval").at("by_length").dump();
}

}  // namespace
}  // namespace kvcheck
