// The real SmolLM2-135M GGUF (ci/install-deps.sh fetches it) through verify: full-fp32
// reproduces the reference's greedy tokens, and a policy of each kind (evicting, quantizing,
// mixed-precision) holds the per-step oracle at every decode step. A subset of ci/real-model.sh,
// which runs every registered policy at longer prompts.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using testing::run_kvcheck;
using testing::shell_quote;

TEST(GgufRealModelSlow, SmolLm2PoliciesHoldTheOracleAndFullFp32ReproducesTheReference) {
  const std::filesystem::path model = testing::smollm2_gguf();
  if (model.empty()) GTEST_SKIP() << testing::kSmolLm2Missing;
  const testing::TempDir dir;
  for (const char* policy : {"full-fp32", "h2o:budget=32", "kivi2:group=16,residual=32", "leankv"}) {
    SCOPED_TRACE(policy);
    const std::filesystem::path json = dir / "v.json";
    const testing::CliRun run =
        run_kvcheck("verify --model " + shell_quote(model) + " --policy " + shell_quote(policy) +
                    " --verify-each-step --prompts 1 --prompt-tokens 96 --max-new-tokens 12 --json " + shell_quote(json));
    ASSERT_EQ(run.code, 0) << run.output;  // 3: an oracle violation
    const nlohmann::json j = nlohmann::json::parse(testing::read_file(json));
    if (std::string(policy) == "full-fp32") {
      EXPECT_EQ(j.at("greedy_match_fraction").get<double>(), 1.0);
      EXPECT_LT(j.at("logits_nmse_max").get<double>(), 1e-9);
    } else {
      EXPECT_GT(j.at("kl_mean").get<double>(), 0.0);  // the policy changed something
    }
  }
}

}  // namespace
}  // namespace kvcheck
