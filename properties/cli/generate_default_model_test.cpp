// kvcheck generate without --model uses the embedded default model under <datasets>/models/kvcheck-tiny,
// where <datasets> is $KVCHECK_DATASETS or the source tree's datasets/ folder.
#include <gtest/gtest.h>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

TEST(GenerateDefaultModel, MissingEmbeddedModelIsNamed) {
  testing::TempDir dir;
  const testing::CliRun run =
      testing::run_kvcheck("generate --ids 1,2,3 --max-new-tokens 1", "KVCHECK_DATASETS=" + testing::shell_quote(dir.path()));
  EXPECT_EQ(run.code, 2) << run.output;
  EXPECT_NE(run.output.find((dir.path() / "models" / "kvcheck-tiny").string()), std::string::npos) << run.output;
}

TEST(GenerateDefaultModel, UsesTheModelUnderKvcheckDatasets) {
  testing::TempDir dir;
  const auto model_dir = dir / "models" / "kvcheck-tiny";
  const testing::CliRun made = testing::run_kvcheck(
      "make-model --random --layers 1 --hidden 32 --heads 2 --kv-heads 1 --vocab 64 --max-positions 16 --seed 3 --out " +
      testing::shell_quote(model_dir));
  ASSERT_EQ(made.code, 0) << made.output;
  const std::string env = "KVCHECK_DATASETS=" + testing::shell_quote(dir.path());
  const testing::CliRun by_default = testing::run_kvcheck("generate --ids 1,2,3 --max-new-tokens 4", env);
  const testing::CliRun explicit_model =
      testing::run_kvcheck("generate --model " + testing::shell_quote(model_dir) + " --ids 1,2,3 --max-new-tokens 4");
  ASSERT_EQ(by_default.code, 0) << by_default.output;
  ASSERT_EQ(explicit_model.code, 0) << explicit_model.output;
  EXPECT_EQ(by_default.output, explicit_model.output);
}

}  // namespace
}  // namespace kvcheck
