// kvcheck generate and eval on a model directory whose only tokenizer is a Hugging Face
// tokenizer.json (+ tokenizer_config.json): the real Qwen3 tokenizer on a tiny random model with
// Qwen's vocabulary size. The prompt is tokenized by it (same output as --ids with its ids), and a
// retrieval answer counts as right when the model generates it as the continuation of the prompt
// (the leading-space token included).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "oracles/eval_retrieval.h"
#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"
#include "reference/generate.h"
#include "reference/model.h"
#include "reference/tokenizer.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::CliRun;
using testing::run_kvcheck;
using testing::source_path;
using testing::TempDir;
using testing::write_file;

std::string q(const std::filesystem::path& p) { return testing::shell_quote(p); }

struct QwenModel {
  TempDir dir;
  std::filesystem::path model = dir / "model";
  QwenModel() {
    const CliRun r = run_kvcheck("make-model --random --family qwen2 --layers 1 --hidden 16 --heads 2 --kv-heads 1 "
                                 "--max-positions 256 --vocab 151936 --seed 11 --out " + q(model));
    EXPECT_EQ(r.code, 0) << r.output;
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      std::filesystem::copy_file(source_path(std::string("datasets/tokenizers/qwen3/") + f), model / f);
    }
    EXPECT_FALSE(std::filesystem::exists(model / "tokenizer.model"));
  }
};

TEST(TokenizerJsonCli, GenerateTokenizesThePromptWithTokenizerJson) {
  QwenModel m;
  const CliRun text = run_kvcheck("generate --model " + q(m.model) + " --prompt 'Hello world' --max-new-tokens 3 --ignore-eos");
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("prompt ids: 9707 1879\n"), std::string::npos) << text.output;
  // Qwen's ids of "Hello world" (no BOS: Qwen has none).
  const CliRun ids = run_kvcheck("generate --model " + q(m.model) + " --ids 9707,1879 --max-new-tokens 3 --ignore-eos");
  ASSERT_EQ(ids.code, 0) << ids.output;
  auto generated = [](const std::string& out) {
    const auto at = out.find("generated");
    return at == std::string::npos ? out : out.substr(at);
  };
  EXPECT_EQ(generated(text.output), generated(ids.output)) << text.output << "\n---\n" << ids.output;
}

TEST(TokenizerJsonCli, EvalScoresTheAnswerAsTheContinuationOfThePrompt) {
  QwenModel m;
  const ReferenceModel ref = ReferenceModel::load(m.model);
  const Tokenizer tok = Tokenizer::load(m.model / "tokenizer.json");
  ASSERT_EQ(tok.format(), "tokenizer.json");
  // A prompt whose greedy continuation is " <text>" and tokenizes back to the same ids.
  std::string prompt, answer;
  for (int i = 0; i < 40 && answer.empty(); ++i) {
    const std::string p = "The pass key is hidden in note " + std::to_string(i) + ". The pass key is";
    const auto prompt_ids = tok.encode(p, true);
    GenerateOptions o;
    o.max_new_tokens = 2;
    o.stop_at_eos = false;
    const GenerateResult g = generate_greedy(ref, prompt_ids, o);
    const std::string text = tok.decode(g.generated);
    if (text.size() < 2 || text[0] != ' ' || text[1] == ' ') continue;
    auto whole = prompt_ids;
    whole.insert(whole.end(), g.generated.begin(), g.generated.end());
    if (tok.encode(p + text, true) != whole) continue;
    prompt = p;
    answer = text.substr(1);
  }
  ASSERT_FALSE(answer.empty()) << "no prompt of 40 had a continuation that starts with a space and round-trips";
  RetrievalItem item;
  item.prompt = prompt;
  item.answer = answer;
  ASSERT_NE(retrieval_answer_ids(tok, item, "x"), tok.encode(answer, false)) << "the test needs a leading-space answer";

  write_file(m.dir / "heldout.jsonl", json{{"id", "d"}, {"text", "Hello world. The pass key is a number."}}.dump() + "\n");
  write_file(m.dir / "retrieval.jsonl",
             json{{"id", "r1"}, {"task", "passkey"}, {"length_bucket", 8}, {"prompt", prompt}, {"answer", answer}}.dump() + "\n" +
             json{{"id", "r2"}, {"task", "passkey"}, {"length_bucket", 8}, {"prompt", prompt}, {"answer", "zzqx"}}.dump() + "\n");
  const CliRun r = run_kvcheck("eval --model " + q(m.model) + " --heldout " + q(m.dir / "heldout.jsonl") + " --retrieval " +
                               q(m.dir / "retrieval.jsonl") + " --task all --quiet --json " + q(m.dir / "out.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = json::parse(testing::read_file(m.dir / "out.json"));
  ASSERT_EQ(j["retrieval"]["results"].size(), 2U);
  EXPECT_EQ(j["retrieval"]["results"][0]["correct"], true) << j["retrieval"].dump();
  EXPECT_EQ(j["retrieval"]["results"][1]["correct"], false);
  EXPECT_GT(j["ppl"]["predicted_tokens"].get<int>(), 5);
}

}  // namespace
}  // namespace kvcheck
