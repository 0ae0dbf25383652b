// The golden logits of datasets/golden/reference_random_seed42.json: a fixed random model written
// by the kvcheck binary, a fixed prompt, the reference's logits. Catches any change to weight
// generation, checkpoint I/O or the forward pass. The file says how to regenerate it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "properties/support/test_support.h"
#include "reference/npy.h"

namespace kvcheck {
namespace {

TEST(GoldenLogits, FixedRandomModelFixedPrompt) {
  const auto golden = nlohmann::json::parse(testing::read_file(testing::source_path("datasets/golden/reference_random_seed42.json")));
  ASSERT_EQ(golden.at("format"), "kvcheck-golden-logits");
  ASSERT_EQ(golden.at("version"), 1);
  testing::TempDir dir;
  const std::string make = fmt::format("{} {} --out '{}' > /dev/null", KVCHECK_BINARY,
                                       fmt::join(golden.at("make_model_args").get<std::vector<std::string>>(), " "),
                                       (dir / "m").string());
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  const std::string gen = fmt::format("{} generate --model '{}' --ids {} --max-new-tokens 0 --dump-logits '{}' > /dev/null",
                                      KVCHECK_BINARY, (dir / "m").string(),
                                      fmt::join(golden.at("ids").get<std::vector<int>>(), ","), (dir / "l.npy").string());
  ASSERT_EQ(std::system(gen.c_str()), 0) << gen;
  const NpyArrayF32 logits = read_npy_f32(dir / "l.npy");
  const auto want = golden.at("logits_first5").get<std::vector<std::vector<double>>>();
  const double tol = golden.at("tolerance_abs").get<double>();
  ASSERT_EQ(logits.shape.size(), 2U);
  ASSERT_EQ(logits.shape[0], static_cast<std::int64_t>(want.size()));
  for (std::size_t row = 0; row < want.size(); ++row) {
    for (std::size_t col = 0; col < want[row].size(); ++col) {
      EXPECT_NEAR(logits.data[row * static_cast<std::size_t>(logits.shape[1]) + col], want[row][col], tol)
          << "position " << row << ", token " << col;
    }
  }
}

}  // namespace
}  // namespace kvcheck
