// kvcheck report on a real model shape with a real tokenizer, as a user with their own checkpoint
// runs it: make-model --shape writes the published shape (random bf16 weights) with the
// tokenizer.json copied in, and report --quick runs on it. The prompts must be held-out text and
// the retrieval items must run, both through that tokenizer (no random-id fallback), and every
// configuration's per-step oracle must hold.
//
// The small size: a policy of each kind over the two shapes (uniform fp8 / int4, evicting h2o
// and tiered leankv on the 0.5B shape; residual kivi2 and evicting snapkv on the 1B one), one
// budget, two retrieval items: about 3 + 5 minutes on 2 cores, label real-shape, run by
// ci/real-shapes.sh beside every registered policy at the full --quick size (the gate leaves them
// out to stay within 30 minutes; docs/models.md, "Real shapes without weights"). The two hold a
// lock so their peak RSS (the reference computes in double: 5.9 and ~12 GB) never adds up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::CliRun;
using testing::run_kvcheck;
using testing::shell_quote;
using testing::source_path;
using testing::TempDir;

void expect_text_report_on_shape(const std::string& shape, const std::filesystem::path& tokenizer,
                                 const std::string& policies) {
  TempDir dir;
  const CliRun made = run_kvcheck("make-model --random --shape " + shape + " --seed 3 --tokenizer-json " +
                                  shell_quote(tokenizer / "tokenizer.json") + " --out " + shell_quote(dir / "m"));
  ASSERT_EQ(made.code, 0) << made.output;
  ASSERT_TRUE(std::filesystem::exists(dir / "m" / "tokenizer.json"));

  const CliRun r = run_kvcheck("report --quick --quiet --policies " + policies + " --budgets 32 --retrieval-items 2 --model " +
                               shell_quote(dir / "m") + " --out " + shell_quote(dir / "r"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("random token ids"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" s wall, peak RSS "), std::string::npos) << r.output;

  const json j = json::parse(testing::read_file(dir / "r" / "report.json"));
  const std::string source = j.at("reference").at("prompt_source").get<std::string>();
  EXPECT_TRUE(source.ends_with("heldout.jsonl")) << source;
  EXPECT_EQ(j.at("settings").at("retrieval_items"), 2) << j.at("settings").dump();
  const auto commas = static_cast<std::size_t>(std::count(policies.begin(), policies.end(), ','));
  ASSERT_EQ(j.at("rows").size(), commas + 1) << j.at("rows").dump();
  for (const json& row : j.at("rows")) {
    SCOPED_TRACE(row.at("policy").get<std::string>());
    EXPECT_EQ(row.at("oracle_violations"), 0);
    EXPECT_EQ(row.at("retrieval_items"), 2);
    EXPECT_TRUE(std::isfinite(row.at("kl_mean").get<double>()));
  }
  // A random real-shape model's perplexity is astronomic (~1e90): printed with an exponent, not
  // as ninety digits.
  const std::string md = testing::read_file(dir / "r" / "report.md");
  EXPECT_FALSE(std::regex_search(md, std::regex("[0-9]{12}"))) << md.substr(0, 400);
  EXPECT_GT(j.at("run").at("peak_rss_bytes").get<std::int64_t>(), std::int64_t{500} << 20);  // the 0.5B+ weights are read
}

TEST(RealShapeReportSlow, Qwen25ShapeWithTheQwenTokenizerGetsATextReport) {
  // Qwen2.5 and Qwen3 share the byte-level BPE vocabulary (151,643 tokens + added tokens, all
  // below the shapes' 151,936 rows); the Qwen3 tokenizer is the one committed (Apache-2.0).
  expect_text_report_on_shape("qwen2.5-0.5b", source_path("datasets/tokenizers/qwen3"), "fp8,int4,h2o,leankv");
}

TEST(RealShapeReportSlow, Llama32ShapeWithTheLlama3Tokenizer) {
  const auto dir = testing::fixture_tokenizer_dir("llama3");
  if (dir.empty()) {
    GTEST_SKIP() << "Llama 3's tokenizer.json is not redistributed here; fetch it with: "
                 << "datasets/tokenizers/fetch.sh (ci/install-deps.sh runs it; or put it in $KVCHECK_TOKENIZERS/llama3/)";
  }
  expect_text_report_on_shape("llama3.2-1b", dir, "kivi2,snapkv");
}

}  // namespace
}  // namespace kvcheck
