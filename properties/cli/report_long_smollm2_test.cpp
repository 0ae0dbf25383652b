// The real model's long-context regression gate: kvcheck report --long --quick on SmolLM2-135M
// against datasets/baselines/report-long-quick-smollm2.json (skipped, naming ci/install-deps.sh,
// when the GGUF is not fetched).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "properties/support/cli_runner.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using testing::run_kvcheck;
using testing::shell_quote;

// The real model's short long-context report against its committed baseline (the gate catches a
// change that moves SmolLM2's numbers). Regenerate (datasets/baselines/README.md): kvcheck report --model
// GGUF --long --quick --out DIR --baseline datasets/baselines/report-long-quick-smollm2.json --update-baseline.
TEST(ReportLongSlow, SmolLm2MatchesTheCommittedBaseline) {
  const std::filesystem::path gguf = testing::smollm2_gguf();
  if (gguf.empty()) GTEST_SKIP() << testing::kSmolLm2Missing;
  testing::TempDir tmp;
  const testing::CliRun run = run_kvcheck(fmt::format(
      "report --model {} --long --quick --quiet --threads 2 --out {} --baseline {}", shell_quote(gguf),
      shell_quote(tmp.path()), shell_quote(testing::source_path("datasets/baselines/report-long-quick-smollm2.json"))));
  EXPECT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("no regression against"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace kvcheck
