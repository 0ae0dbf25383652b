// kvcheck make-model as a user runs it: --family qwen3 writes q_norm / k_norm; --shape refuses
// every flag that would change the shape, naming both; --tokenizer-json copies the tokenizer with
// the files that sit beside it and refuses one with ids past the model's vocabulary, before
// anything is written. The published shapes themselves are checked in
// properties/reference/dummy_model_test.cpp and (written to disk) in MakeModelCliSlow.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"
#include "reference/model.h"
#include "reference/safetensors.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::CliRun;
using testing::run_kvcheck;
using testing::shell_quote;
using testing::TempDir;

// A BPE tokenizer.json whose largest id is `last_id` (an added token), in the layout of the
// published files (model.vocab: token -> id, added_tokens with ids above it).
std::string tokenizer_json(int vocab_tokens, int last_id) {
  json vocab = json::object();
  for (int i = 0; i < vocab_tokens; ++i) vocab["t" + std::to_string(i)] = i;
  json j;
  j["version"] = "1.0";
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}};
  j["added_tokens"] = json::array({{{"id", last_id}, {"content", "<|endoftext|>"}, {"special", true}}});
  return j.dump();
}

TEST(MakeModelCli, Qwen3FamilyWritesPerHeadNorms) {
  TempDir dir;
  const CliRun r = run_kvcheck("make-model --random --family qwen3 --layers 2 --hidden 32 --heads 4 --kv-heads 2 "
                               "--head-dim 16 --vocab 64 --seed 1 --out " + shell_quote(dir / "m"));
  ASSERT_EQ(r.code, 0) << r.output;
  const Checkpoint checkpoint = Checkpoint::open(dir / "m");
  for (const char* name : {"model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight"}) {
    const auto t = checkpoint.find(name);
    ASSERT_TRUE(t.has_value()) << name;
    EXPECT_EQ(t->shape, (std::vector<std::int64_t>{16})) << name;
  }
  EXPECT_FALSE(checkpoint.find("model.layers.0.self_attn.q_proj.bias").has_value());  // attention_bias false
  EXPECT_EQ(ReferenceModel::load(dir / "m").config().q_dim(), 64);  // 4 x 16, wider than hidden 32
}

TEST(MakeModelCli, OutlierKeyChannelsScaleExactlyTheirRowsOfWk) {
  TempDir dir;
  const std::string shape = "make-model --random --family qwen2 --layers 2 --hidden 32 --heads 4 --kv-heads 2 "
                            "--head-dim 16 --vocab 64 --seed 5 --out ";
  ASSERT_EQ(run_kvcheck(shape + shell_quote(dir / "plain")).code, 0);
  const CliRun r = run_kvcheck(shape + shell_quote(dir / "outliers") + " --outlier-key-channels 2 --outlier-scale 30");
  ASSERT_EQ(r.code, 0) << r.output;
  const Checkpoint plain = Checkpoint::open(dir / "plain"), outliers = Checkpoint::open(dir / "outliers");
  for (const char* part : {"weight", "bias"}) {  // qwen2 has a k bias
    for (int l = 0; l < 2; ++l) {
      const std::string name = "model.layers." + std::to_string(l) + ".self_attn.k_proj." + part;
      const auto a = plain.find(name), b = outliers.find(name);
      ASSERT_TRUE(a && b) << name;
      std::vector<float> x(static_cast<std::size_t>(a->numel())), y(x.size());
      to_float(*a, x, name);
      to_float(*b, y, name);
      const std::int64_t row = a->shape.size() == 2 ? a->shape[1] : 1;
      for (std::int64_t ch = 0; ch < 32; ++ch) {  // 2 kv heads x 16 channels: 6, 7 and 22, 23 planted
        const bool planted = ch % 16 == 7 || ch % 16 == 6;
        for (std::int64_t j = 0; j < row; ++j) {
          const float w = x[static_cast<std::size_t>(ch * row + j)];
          EXPECT_EQ(y[static_cast<std::size_t>(ch * row + j)], planted ? static_cast<float>(w * 30.0) : w)
              << name << " channel " << ch;
        }
      }
    }
  }
  // Every other tensor is unchanged.
  for (const char* name : {"model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.v_proj.weight"}) {
    const auto a = plain.find(name), b = outliers.find(name);
    ASSERT_TRUE(a && b);
    EXPECT_TRUE(std::equal(a->bytes.begin(), a->bytes.end(), b->bytes.begin(), b->bytes.end())) << name;
  }
  for (const std::string bad : {"--outlier-key-channels 9", "--outlier-key-channels -1 --outlier-scale 3",
                                "--outlier-key-channels 1 --outlier-scale 0"}) {
    const CliRun e = run_kvcheck(shape + shell_quote(dir / "bad") + " " + bad);
    EXPECT_EQ(e.code, 2) << bad << ": " << e.output;
    EXPECT_NE(e.output.find("--outlier-"), std::string::npos) << e.output;
  }
}

TEST(MakeModelCli, ShapeFlagsConflictingWithShapeAreNamed) {
  TempDir dir;
  for (const std::string flag : {"--layers 2", "--hidden 64", "--heads 4", "--kv-heads 2", "--vocab 100", "--tie",
                                 "--family llama", "--head-dim 32", "--max-positions 64", "--rope-theta 10"}) {
    const CliRun r = run_kvcheck("make-model --random --shape qwen3-0.6b " + flag + " --out " + shell_quote(dir / "m"));
    EXPECT_EQ(r.code, 2) << flag << ": " << r.output;
    EXPECT_NE(r.output.find("--shape"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(flag.substr(0, flag.find(' '))), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "m")) << flag;
  }
  const CliRun unknown = run_kvcheck("make-model --random --shape gpt-5 --out " + shell_quote(dir / "m"));
  EXPECT_EQ(unknown.code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("qwen2.5-0.5b"), std::string::npos) << unknown.output;
}

TEST(MakeModelCli, TokenizerJsonPastTheShapesVocabIsRefusedBeforeWriting) {
  TempDir dir;
  const auto tok = dir / "tok" / "tokenizer.json";
  std::filesystem::create_directories(tok.parent_path());
  // Qwen's vocabulary is 151936 rows; an id of 151936 has no embedding row.
  testing::write_file(tok, tokenizer_json(1000, 151936));
  const CliRun r = run_kvcheck("make-model --random --shape qwen3-0.6b --tokenizer-json " + shell_quote(tok) +
                               " --out " + shell_quote(dir / "m"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(tok.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("151936"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("qwen3-0.6b"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "m"));

  const auto missing = run_kvcheck("make-model --random --vocab 64 --tokenizer-json " + shell_quote(dir / "none.json") +
                                   " --out " + shell_quote(dir / "m"));
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find("none.json"), std::string::npos) << missing.output;

  testing::write_file(dir / "bad.json", R"({"model": {"vocab": {"a": "zero"}}})");
  const auto bad = run_kvcheck("make-model --random --vocab 64 --tokenizer-json " + shell_quote(dir / "bad.json") +
                               " --out " + shell_quote(dir / "m"));
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("bad.json"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("model.vocab"), std::string::npos) << bad.output;
}

TEST(MakeModelCli, TokenizerJsonIsCopiedWithTheFilesBesideIt) {
  TempDir dir;
  const auto tok = dir / "tok" / "tokenizer.json";
  std::filesystem::create_directories(tok.parent_path());
  const std::string text = tokenizer_json(90, 99);
  testing::write_file(tok, text);
  testing::write_file(dir / "tok" / "tokenizer_config.json", R"({"add_bos_token": false})");
  testing::write_file(dir / "tok" / "generation_config.json", R"({"eos_token_id": 99})");
  // No --vocab: the tokenizer's 100 ids.
  const CliRun r = run_kvcheck("make-model --random --layers 1 --hidden 32 --heads 2 --kv-heads 1 --tokenizer-json " +
                               shell_quote(tok) + " --out " + shell_quote(dir / "m"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(testing::read_file(dir / "m" / "tokenizer.json"), text);
  EXPECT_EQ(testing::read_file(dir / "m" / "tokenizer_config.json"), R"({"add_bos_token": false})");
  EXPECT_EQ(testing::read_file(dir / "m" / "generation_config.json"), R"({"eos_token_id": 99})");
  EXPECT_EQ(load_config(dir / "m").vocab_size, 100);

  // Without the companions, only tokenizer.json.
  std::filesystem::remove(dir / "tok" / "tokenizer_config.json");
  std::filesystem::remove(dir / "tok" / "generation_config.json");
  const CliRun alone = run_kvcheck("make-model --random --layers 1 --hidden 32 --heads 2 --kv-heads 1 --vocab 128 "
                                   "--tokenizer-json " + shell_quote(tok) + " --out " + shell_quote(dir / "m2"));
  ASSERT_EQ(alone.code, 0) << alone.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "m2" / "tokenizer.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "m2" / "tokenizer_config.json"));
  EXPECT_FALSE(std::filesystem::exists(dir / "m2" / "generation_config.json"));
  EXPECT_EQ(load_config(dir / "m2").vocab_size, 128);
}

// The real-size write: qwen3-0.6b (596M parameters, 1.2 GB of bf16) in the shape's config, every
// tensor present with the shape the config implies (ReferenceModel::load checks each).
TEST(MakeModelCliSlow, Qwen3ShapeWritesThePublishedCheckpoint) {
  TempDir dir;
  const CliRun r = run_kvcheck("make-model --random --shape qwen3-0.6b --seed 1 --out " + shell_quote(dir / "m"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json config = json::parse(testing::read_file(dir / "m" / "config.json"));
  EXPECT_EQ(config["model_type"], "qwen3");
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
  EXPECT_EQ(config["head_dim"], 128);
  const ReferenceModel model = ReferenceModel::load(dir / "m");
  EXPECT_EQ(model.config().num_hidden_layers, 28);
  EXPECT_EQ(std::filesystem::file_size(dir / "m" / "model.safetensors") / 1000000, 1192U);  // 596,049,920 x 2 bytes + header
}

}  // namespace
}  // namespace kvcheck
