// The kvcheck binary, run as a user runs it: make-model then generate, --dump-logits against the
// in-process reference, and every bad input of the foundation issue -> exit code 2 and a message
// that names the file and the field or tensor.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"
#include "reference/generate.h"
#include "reference/model.h"
#include "reference/npy.h"
#include "reference/safetensors.h"

namespace kvcheck {
namespace {

using testing::CliRun;
using testing::run_kvcheck;
using testing::TempDir;

std::string q(const std::filesystem::path& p) { return testing::shell_quote(p); }

// A small random model with the test tokenizer, written by the CLI itself.
std::filesystem::path make_model(const TempDir& dir, const std::string& extra = "") {
  const std::filesystem::path out = dir / "model";
  const CliRun r = run_kvcheck("make-model --random --layers 2 --hidden 32 --heads 4 --kv-heads 2 --max-positions 64 --seed 5 "
                            "--tokenizer " + q(testing::source_path("datasets/tiny/tokenizer.model")) + " --out " + q(out) +
                            " " + extra);
  EXPECT_EQ(r.code, 0) << r.output;
  return out;
}

TEST(Cli, MakeModelThenGeneratePrintsTextAndIds) {
  TempDir dir;
  const auto model = make_model(dir);
  const CliRun r = run_kvcheck("generate --model " + q(model) + " --prompt 'The cache holds' --max-new-tokens 5 --ignore-eos");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("prompt ids: 1 "), std::string::npos) << r.output;  // BOS first
  EXPECT_NE(r.output.find("generated ids: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("prompt text: The cache holds"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("generated text: "), std::string::npos) << r.output;
}

TEST(Cli, DumpLogitsEqualsTheInProcessReference) {
  TempDir dir;
  const auto model = make_model(dir, "--dtype bf16");
  const CliRun r = run_kvcheck("generate --model " + q(model) + " --ids 1,17,300,42 --max-new-tokens 3 --ignore-eos --dump-logits " +
                            q(dir / "logits.npy"));
  ASSERT_EQ(r.code, 0) << r.output;
  const NpyArrayF32 dumped = read_npy_f32(dir / "logits.npy");
  const ReferenceModel ref = ReferenceModel::load(model);
  GenerateOptions o;
  o.max_new_tokens = 3;
  o.stop_at_eos = false;
  o.keep_logits = true;
  const GenerateResult want = generate_greedy(ref, std::vector<std::int32_t>{1, 17, 300, 42}, o);
  ASSERT_EQ(dumped.shape, (std::vector<std::int64_t>{7, ref.config().vocab_size}));
  EXPECT_TRUE(std::equal(dumped.data.begin(), dumped.data.end(), want.logits.data()));
}

TEST(Cli, RecomputePathPrintsTheSameTokens) {
  TempDir dir;
  const auto model = make_model(dir);
  const CliRun a = run_kvcheck("generate --model " + q(model) + " --ids 1,5,9 --max-new-tokens 6 --ignore-eos");
  const CliRun b = run_kvcheck("generate --model " + q(model) + " --ids 1,5,9 --max-new-tokens 6 --ignore-eos --decode-path recompute");
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
}

// ---- bad input: exit code 2, message naming the file and field or tensor ----

struct BadInputCase {
  std::string name;
  std::function<void(const std::filesystem::path& model)> corrupt;  // edits the model directory
  std::string generate_args;                                        // after --model DIR
  std::vector<std::string> expect;                                  // substrings of the message
};

void edit_config(const std::filesystem::path& model, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(testing::read_file(model / "config.json"));
  edit(j);
  testing::write_file(model / "config.json", j.dump(2));
}

// A safetensors file from a raw header string and a data region.
void write_raw_safetensors(const std::filesystem::path& path, const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  testing::write_file(path, bytes + header + data);
}

// Shown by gtest (and ctest) instead of the object's bytes.
void PrintTo(const BadInputCase& c, std::ostream* os) { *os << c.name; }

std::string bad_input_name(const ::testing::TestParamInfo<BadInputCase>& p) { return p.param.name; }

class CliBadInput : public ::testing::TestWithParam<BadInputCase> {};

TEST_P(CliBadInput, ExitsWithCode2AndNamesTheProblem) {
  TempDir dir;
  const auto model = make_model(dir);
  const BadInputCase& c = GetParam();
  if (c.corrupt) c.corrupt(model);
  const CliRun r = run_kvcheck("generate --model " + q(model) + " " + c.generate_args);
  EXPECT_EQ(r.code, 2) << r.output;
  for (const std::string& e : c.expect) {
    const std::string needle = e == "$MODEL" ? model.string() : e;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "'" << needle << "' not in: " << r.output;
  }
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

const std::string kIds = "--ids 1,2,3 --max-new-tokens 2";

INSTANTIATE_TEST_SUITE_P(
    Foundation, CliBadInput,
    ::testing::Values(
        BadInputCase{"ConfigMissingField",
                     [](const auto& m) { edit_config(m, [](auto& j) { j.erase("hidden_size"); }); }, kIds,
                     {"config.json", "hidden_size", "missing"}},
        BadInputCase{"ConfigFieldOfWrongType",
                     [](const auto& m) { edit_config(m, [](auto& j) { j["num_hidden_layers"] = "2"; }); }, kIds,
                     {"config.json", "num_hidden_layers"}},
        BadInputCase{"HeadsDoNotDivideHidden",
                     [](const auto& m) { edit_config(m, [](auto& j) { j["num_attention_heads"] = 5; }); }, kIds,
                     {"config.json", "num_attention_heads", "hidden_size"}},
        BadInputCase{"KvHeadsDoNotDivideHeads",
                     [](const auto& m) { edit_config(m, [](auto& j) { j["num_key_value_heads"] = 3; }); }, kIds,
                     {"config.json", "num_key_value_heads"}},
        BadInputCase{"SafetensorsShorterThanHeaderLength",
                     [](const auto& m) {
                       std::string bytes(8, '\0');  // header length 1000, then only 4 bytes
                       bytes[0] = static_cast<char>(0xe8);
                       bytes[1] = 0x03;
                       testing::write_file(m / "model.safetensors", bytes + "{}  ");
                     },
                     kIds, {"model.safetensors", "header"}},
        BadInputCase{"SafetensorsHeaderNotJson",
                     [](const auto& m) { write_raw_safetensors(m / "model.safetensors", "{not json", ""); }, kIds,
                     {"model.safetensors", "header"}},
        BadInputCase{"SafetensorsOffsetPastEnd",
                     [](const auto& m) {
                       write_raw_safetensors(m / "model.safetensors",
                                             R"({"model.norm.weight":{"dtype":"F32","shape":[32],"data_offsets":[0,128]}})",
                                             std::string(64, '\0'));
                     },
                     kIds, {"model.safetensors", "model.norm.weight"}},
        BadInputCase{"SafetensorsOverlappingTensors",
                     [](const auto& m) {
                       write_raw_safetensors(m / "model.safetensors",
                                             R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                             R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                                             std::string(24, '\0'));
                     },
                     kIds, {"model.safetensors", "\"a\"", "b:", "overlap"}},
        BadInputCase{"TensorDtypeNotAFloat",
                     [](const auto& m) {
                       // Rewrite the checkpoint with model.norm.weight stored as I32.
                       SafetensorsFile f = SafetensorsFile::open(m / "model.safetensors");
                       TensorMap copy;
                       for (const auto& n : f.names()) {
                         const TensorView view = *f.find(n);
                         copy.add(n, n == "model.norm.weight" ? DType::kI32 : view.dtype, view.shape, view.bytes);
                       }
                       write_safetensors(m / "model.safetensors.new", copy);
                       std::filesystem::rename(m / "model.safetensors.new", m / "model.safetensors");
                     },
                     kIds, {"model.safetensors", "model.norm.weight", "I32"}},
        BadInputCase{"TensorShapeDoesNotMatchConfig",
                     [](const auto& m) { edit_config(m, [](auto& j) { j["intermediate_size"] = 128; }); }, kIds,
                     {"model.safetensors", "mlp.gate_proj.weight", "[96, 32]", "[128, 32]"}},
        BadInputCase{"MissingTensor",
                     [](const auto& m) {
                       SafetensorsFile f = SafetensorsFile::open(m / "model.safetensors");
                       TensorMap copy;
                       for (const auto& n : f.names()) {
                         const TensorView view = *f.find(n);
                         if (n != "model.layers.1.self_attn.v_proj.weight") copy.add(n, view.dtype, view.shape, view.bytes);
                       }
                       write_safetensors(m / "model.safetensors.new", copy);
                       std::filesystem::rename(m / "model.safetensors.new", m / "model.safetensors");
                     },
                     kIds, {"model.layers.1.self_attn.v_proj.weight", "missing tensor", "config.json"}},
        BadInputCase{"EmptyPrompt", nullptr, "--prompt ''", {"empty prompt"}},
        BadInputCase{"EmptyIds", nullptr, "--ids ''", {"empty prompt"}},
        BadInputCase{"TokenIdOutsideVocabulary", nullptr, "--ids 1,2,512", {"--ids", "index 2", "token id 512", "[0, 512)"}},
        BadInputCase{"NegativeTokenId", nullptr, "--ids 1,-4", {"token id -4"}},
        BadInputCase{"TokenIdNotANumber", nullptr, "--ids 1,x7,3", {"--ids", "index 1", "'x7'"}},
        BadInputCase{"PromptLongerThanMaxPositions", nullptr,
                     "--ids 1" + [] { std::string s; for (int i = 0; i < 64; ++i) s += ",5"; return s; }(),
                     {"prompt", "65 tokens", "max_position_embeddings 64", "config.json"}},
        BadInputCase{"ModelDirectoryMissing",
                     [](const auto& m) { std::filesystem::remove_all(m); }, kIds, {"config.json"}},
        BadInputCase{"UnknownFlag", nullptr, "--frobnicate 3", {"frobnicate"}},
        BadInputCase{"PolicyWithTheReferenceEngine", nullptr, "--ids 1,5 --policy int8",
                     {"--policy", "int8", "--engine optimized"}},
        BadInputCase{"PolicyWithAnUnknownParameter", nullptr, "--ids 1,5 --engine optimized --policy streaming:budget=12",
                     {"streaming", "unknown parameter 'budget'"}}),
    bad_input_name);

TEST(Cli, MakeModelRejectsBadShapesWithCode2) {
  TempDir dir;
  const CliRun r = run_kvcheck("make-model --random --layers 1 --hidden 30 --heads 4 --kv-heads 2 --vocab 50 --out " + q(dir / "m"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("num_attention_heads"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "m" / "model.safetensors"));
}

}  // namespace
}  // namespace kvcheck
