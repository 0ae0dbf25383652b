// Golden logits of the embedded model (datasets/golden/kvcheck-tiny/): the reference's logits at
// every position of three fixed prompts, full vocabulary. Catches any change to the forward pass,
// the tokenizer wrapper or the embedded checkpoint; the manifest names the weights by SHA-256 so a
// retrained model fails with a message saying to regenerate, not with a wall of logit mismatches.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "oracles/metrics.h"
#include "properties/support/test_support.h"
#include "reference/npy.h"

namespace kvcheck {
namespace {

std::string sha256_of(const std::string& path) {
  testing::TempDir dir;
  const std::string out = (dir / "sha").string();
  const std::string cmd = fmt::format("sha256sum '{}' | cut -d' ' -f1 > '{}'", path, out);
  if (std::system(cmd.c_str()) != 0) return "";
  std::string text = testing::read_file(out);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

TEST(GoldenLogits, EmbeddedModelFixedPrompts) {
  const auto manifest =
      nlohmann::json::parse(testing::read_file(testing::source_path("datasets/golden/kvcheck-tiny/manifest.json")));
  ASSERT_EQ(manifest.at("format"), "kvcheck-golden-logits");
  ASSERT_EQ(manifest.at("version"), 2);
  const std::string model = testing::source_path(manifest.at("model").get<std::string>()).string();
  ASSERT_EQ(sha256_of(model + "/model.safetensors"), manifest.at("model_safetensors_sha256").get<std::string>())
      << "the embedded model's weights changed: regenerate the golden logits with "
      << manifest.at("regenerate").get<std::string>();
  const double nmse_max = manifest.at("nmse_max").get<double>();
  testing::TempDir dir;
  int index = 0;
  for (const auto& entry : manifest.at("prompts")) {
    SCOPED_TRACE(fmt::format("prompt {}: {}", index, entry.at("prompt").get<std::string>()));
    const std::string logits_path = (dir / fmt::format("p{}.npy", index)).string();
    const std::string ids_path = (dir / fmt::format("p{}.txt", index)).string();
    const std::string prompt_path = (dir / fmt::format("p{}.prompt", index)).string();
    testing::write_file(prompt_path, entry.at("prompt").get<std::string>());
    const std::string cmd = fmt::format(
        "{} generate --model '{}' --prompt \"$(cat '{}')\" --max-new-tokens 0 --dump-logits '{}' "
        "| sed -n 's/^prompt ids: //p' > '{}'",
        KVCHECK_BINARY, model, prompt_path, logits_path, ids_path);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

    std::vector<int> ids;
    std::istringstream words(testing::read_file(ids_path));
    for (int id = 0; words >> id;) ids.push_back(id);
    EXPECT_EQ(ids, entry.at("ids").get<std::vector<int>>()) << "the tokenizer encodes the prompt differently";

    const NpyArrayF32 got = read_npy_f32(logits_path);
    const NpyArrayF32 want = read_npy_f32(testing::source_path("datasets/golden/kvcheck-tiny") /
                                          entry.at("logits").get<std::string>());
    ASSERT_EQ(got.shape, want.shape);
    const double e = nmse(got.data, want.data);
    EXPECT_LT(e, nmse_max) << "max |diff| " << max_abs_diff(got.data, want.data);
    ++index;
  }
  EXPECT_EQ(index, 3);
}

}  // namespace
}  // namespace kvcheck
