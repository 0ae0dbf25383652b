// GGUF files through the CLI, as a user runs it: --model FILE.gguf in every command that takes a
// model, make-model --from-gguf, generate --chat, and bad files refused with exit 2.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "properties/support/cli_runner.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"
#include "reference/gguf_model.h"
#include "reference/random_model.h"

namespace kvcheck {
namespace {

using testing::read_file;
using testing::run_kvcheck;
using testing::shell_quote;
using testing::TempDir;

// A two-layer llama with the tiny byte-level tokenizer and a ChatML template, as GGUF.
std::filesystem::path tiny_gguf(const TempDir& dir, bool chat_template = true) {
  ModelConfig c = testing::tiny_config();
  c.vocab_size = 300;
  c.max_position_embeddings = 256;
  c.bos_token_id = 256;
  c.eos_token_ids = {257};
  auto kv = testing::tiny_gpt2_tokenizer(300);
  if (chat_template) {
    kv.emplace_back("tokenizer.chat_template",
                    gguf_string("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + "
                                "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"));
  }
  const std::filesystem::path path = dir / (chat_template ? "m.gguf" : "plain.gguf");
  write_gguf_model(path, c, make_random_weights(c, DType::kF32, 9), kv);
  return path;
}

TEST(GgufCli, EveryModelCommandTakesAGgufFile) {
  const TempDir dir;
  const std::string m = shell_quote(tiny_gguf(dir));
  const struct {
    const char* what;
    std::string args;
  } runs[] = {
      {"generate", "generate --model " + m + " --prompt 'hello there' --max-new-tokens 4 --ignore-eos"},
      {"generate optimized", "generate --model " + m + " --prompt 'hello' --max-new-tokens 4 --engine optimized --policy int8"},
      {"verify", "verify --model " + m + " --policy h2o:budget=24 --verify-each-step --prompts 2 --prompt-tokens 24 "
                 "--max-new-tokens 8"},
      {"eval", "eval --model " + m + " --task ppl --limit 1 --context 64 --quiet"},
      {"bench", "bench --engine --model " + m + " --prompt-tokens 16 --new-tokens 4 --repeat 1"},
  };
  for (const auto& r : runs) {
    const testing::CliRun run = run_kvcheck(r.args);
    EXPECT_EQ(run.code, 0) << r.what << ":\n" << run.output;
  }
}

// The converted directory is the same model: the same logits (written as .npy) and the same ids.
TEST(GgufCli, MakeModelFromGgufWritesTheSameModelAsACheckpoint) {
  const TempDir dir;
  const std::filesystem::path m = tiny_gguf(dir);
  const testing::CliRun made = run_kvcheck("make-model --from-gguf " + shell_quote(m) + " --out " + shell_quote(dir / "hf"));
  ASSERT_EQ(made.code, 0) << made.output;
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / "hf" / file)) << file;
  }
  const std::string prompt = " --prompt 'hello <s>wor\xC3\xA9ld 123' --max-new-tokens 3 --ignore-eos --dump-logits ";
  const testing::CliRun a = run_kvcheck("generate --model " + shell_quote(m) + prompt + shell_quote(dir / "a.npy"));
  const testing::CliRun b = run_kvcheck("generate --model " + shell_quote(dir / "hf") + prompt + shell_quote(dir / "b.npy"));
  ASSERT_EQ(a.code, 0) << a.output;
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_EQ(read_file(dir / "a.npy"), read_file(dir / "b.npy"));
  const auto ids = [](const std::string& out) { return out.substr(0, out.find("prompt text")); };
  EXPECT_EQ(ids(a.output), ids(b.output));
  EXPECT_NE(a.output.find("prompt ids: 256 "), std::string::npos) << a.output;  // add_bos_token: <s> first
}

TEST(GgufCli, ChatAppliesTheFilesTemplate) {
  const TempDir dir;
  const std::filesystem::path m = tiny_gguf(dir);
  const testing::CliRun run = run_kvcheck("generate --model " + shell_quote(m) + " --chat hi --max-new-tokens 1");
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("prompt text: <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), std::string::npos) << run.output;
  const std::filesystem::path plain = tiny_gguf(dir, false);
  const testing::CliRun refused = run_kvcheck("generate --model " + shell_quote(plain) + " --chat hi");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("chat template"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find(plain.string()), std::string::npos) << refused.output;
}

TEST(GgufCli, BadFilesExitWithCode2NamingTheFileAndField) {
  const TempDir dir;
  const std::string good = read_file(tiny_gguf(dir));
  testing::write_file(dir / "cut.gguf", good.substr(0, good.size() / 2));
  std::string v1 = good;
  v1[4] = 1;
  testing::write_file(dir / "v1.gguf", v1);
  const struct {
    const char* file;
    const char* needle;
  } cases[] = {{"cut.gguf", "truncated"}, {"v1.gguf", "version 1"}};
  for (const auto& c : cases) {
    for (const char* command : {"generate --ids 1", "verify", "eval --task ppl", "make-model --from-gguf"}) {
      const std::string flag = std::string(command).starts_with("make-model") ? " " : " --model ";
      const std::string out = std::string(command).starts_with("make-model") ? " --out " + shell_quote(dir / "out") : "";
      const testing::CliRun run = run_kvcheck(std::string(command) + flag + shell_quote(dir / c.file) + out);
      EXPECT_EQ(run.code, 2) << command << " " << c.file << ":\n" << run.output;
      EXPECT_NE(run.output.find((dir / c.file).string()), std::string::npos) << command << ":\n" << run.output;
      EXPECT_NE(run.output.find(c.needle), std::string::npos) << command << ":\n" << run.output;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));  // nothing half-written
}

}  // namespace
}  // namespace kvcheck
