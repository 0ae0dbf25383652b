// GGUF files as models: the config from the metadata, the tensors under Hugging Face names with
// llama's Q/K row permutation undone, and the same logits as the same weights in safetensors.
#include "reference/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"
#include "reference/errors.h"
#include "reference/gguf.h"
#include "reference/model.h"
#include "reference/random_model.h"
#include "reference/tokenizer.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;
using testing::TempDir;
using testing::test_tokens;
using testing::tiny_config;

ModelConfig qwen2_config() {
  ModelConfig c = tiny_config();
  c.family = ModelFamily::kQwen2;
  c.qkv_bias = true;
  return c;
}

// The same random weights as a Hugging Face directory and as a GGUF file give the same logits,
// bit for bit: the names, the layout (dims reversed), the Q/K rows and the metadata all map back.
TEST(GgufModel, SameLogitsAsTheSafetensorsCheckpoint) {
  const TempDir dir;
  struct Case {
    const char* name;
    ModelConfig config;
    DType dtype;
  };
  ModelConfig untied = tiny_config();
  untied.tie_word_embeddings = false;
  const Case cases[] = {{"llama-f32", tiny_config(), DType::kF32},
                        {"llama-bf16-untied", untied, DType::kBF16},
                        {"qwen2-f16", qwen2_config(), DType::kF16},
                        {"qwen3-f32", testing::tiny_qwen3_config(), DType::kF32}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const TensorMap weights = make_random_weights(c.config, c.dtype, 7);
    write_model(dir / c.name, c.config, weights);
    const std::filesystem::path gguf = dir / (std::string(c.name) + ".gguf");
    write_gguf_model(gguf, c.config, weights);
    const ReferenceModel hf = ReferenceModel::load(dir / c.name);
    const ReferenceModel gg = ReferenceModel::load(gguf);
    EXPECT_EQ(gg.config().tie_word_embeddings, c.config.tie_word_embeddings);
    EXPECT_EQ(gg.config().rms_norm_eps, c.config.rms_norm_eps);
    EXPECT_EQ(gg.config().qkv_bias, c.config.qkv_bias);
    EXPECT_EQ(gg.config().qk_norm(), c.config.qk_norm());
    const std::vector<std::int32_t> tokens = test_tokens(19, c.config.vocab_size, 5);
    const MatrixRM a = hf.forward(tokens);
    const MatrixRM b = gg.forward(tokens);
    ASSERT_EQ(a.rows(), b.rows());
    EXPECT_TRUE(a == b) << "max |diff| " << (a - b).cwiseAbs().maxCoeff();
  }
}

// The converter's permutation really is in the file (so the test above would catch a reader that
// forgot to undo it): GGUF row h*d + 2i + t holds Hugging Face row h*d + t*d/2 + i.
TEST(GgufModel, LlamaQkRowsArePermutedInTheFileAndRestoredOnLoad) {
  EXPECT_EQ(gguf_row_of_hf_row(0, 8), 0);
  EXPECT_EQ(gguf_row_of_hf_row(1, 8), 2);
  EXPECT_EQ(gguf_row_of_hf_row(4, 8), 1);
  EXPECT_EQ(gguf_row_of_hf_row(7, 8), 7);
  EXPECT_EQ(gguf_row_of_hf_row(8 + 5, 8), 8 + 3);
  const TempDir dir;
  const ModelConfig c = tiny_config();
  const TensorMap weights = make_random_weights(c, DType::kF32, 3);
  write_gguf_model(dir / "m.gguf", c, weights);
  const GgufFile file = GgufFile::open(dir / "m.gguf");
  const GgufTensorInfo* q = file.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  const TensorView hf = *weights.find("model.layers.0.self_attn.q_proj.weight");
  const std::size_t row = hf.bytes.size() / static_cast<std::size_t>(hf.shape[0]);
  EXPECT_NE(std::memcmp(q->data.data() + row, hf.bytes.data() + row, row), 0);  // row 1 moved
  EXPECT_EQ(std::memcmp(q->data.data() + 2 * row, hf.bytes.data() + row, row), 0);  // to row 2
  const GgufModel model = load_gguf_model(dir / "m.gguf");
  const TensorView back = *model.tensors->find("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(back.shape, hf.shape);
  EXPECT_EQ(std::memcmp(back.bytes.data(), hf.bytes.data(), hf.bytes.size()), 0);
  EXPECT_NE(model.tensors->origin("model.layers.0.self_attn.q_proj.weight").find("blk.0.attn_q.weight"), std::string::npos);
}

TEST(GgufModel, NamesMapBothWays) {
  EXPECT_EQ(hf_tensor_name("blk.12.ffn_down.weight"), "model.layers.12.mlp.down_proj.weight");
  EXPECT_EQ(hf_tensor_name("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(hf_tensor_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(hf_tensor_name("blk.1.attn_k_norm.weight"), "model.layers.1.self_attn.k_norm.weight");
  EXPECT_EQ(hf_tensor_name("blk.x.attn_q.weight"), std::nullopt);
  EXPECT_EQ(hf_tensor_name("blk.01.attn_q.weight"), std::nullopt);
  EXPECT_EQ(hf_tensor_name("rope_freqs.weight"), std::nullopt);
  EXPECT_EQ(gguf_tensor_name("model.layers.3.self_attn.o_proj.bias"), "blk.3.attn_output.bias");
  EXPECT_EQ(gguf_tensor_name("model.norm.weight"), "output_norm.weight");
}

// Writes a tiny llama GGUF with `edit` applied to its metadata and tensors first.
std::filesystem::path edited_model(const TempDir& dir, const std::string& name,
                                   const std::function<void(std::vector<std::pair<std::string, GgufValue>>&,
                                                            std::vector<GgufTensorToWrite>&)>& edit) {
  const ModelConfig c = tiny_config();
  write_gguf_model(dir / "base.gguf", c, make_random_weights(c, DType::kF32, 1));
  const GgufFile base = GgufFile::open(dir / "base.gguf");
  std::vector<std::pair<std::string, GgufValue>> kv = base.metadata();
  std::vector<GgufTensorToWrite> tensors;
  for (const GgufTensorInfo& t : base.tensors()) {
    tensors.push_back({t.name, t.ne, t.type, std::vector<std::byte>(t.data.begin(), t.data.end())});
  }
  edit(kv, tensors);
  const std::filesystem::path path = dir / name;
  write_gguf(path, kv, tensors);
  return path;
}

void erase_key(std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& key) {
  std::erase_if(kv, [&](const auto& p) { return p.first == key; });
}

void set_key(std::vector<std::pair<std::string, GgufValue>>& kv, const std::string& key, GgufValue value) {
  erase_key(kv, key);
  kv.emplace_back(key, std::move(value));
}

TEST(GgufModel, RefusesWhatItCannotRunNamingTheKeyOrTensor) {
  const TempDir dir;
  using Kv = std::vector<std::pair<std::string, GgufValue>>;
  using Tensors = std::vector<GgufTensorToWrite>;
  auto refused = [&](const std::string& name, const std::function<void(Kv&, Tensors&)>& edit,
                     const std::vector<std::string>& needles) {
    const std::filesystem::path path = edited_model(dir, name, edit);
    std::vector<std::string> all = needles;
    all.push_back(path.string());
    expect_input_error([&] { (void)ReferenceModel::load(path); }, all);
  };
  refused("no-arch.gguf", [](Kv& kv, Tensors&) { erase_key(kv, "general.architecture"); },
          {"general.architecture", "missing"});
  refused("gemma.gguf", [](Kv& kv, Tensors&) { set_key(kv, "general.architecture", gguf_string("gemma")); },
          {"general.architecture", "gemma", "not supported"});
  refused("no-layers.gguf", [](Kv& kv, Tensors&) { erase_key(kv, "llama.block_count"); }, {"llama.block_count", "missing"});
  refused("vocab.gguf", [](Kv& kv, Tensors&) { set_key(kv, "llama.vocab_size", gguf_u32(100)); },
          {"token_embd.weight", "rows", "100"});
  refused("rope.gguf", [](Kv& kv, Tensors&) { set_key(kv, "llama.rope.dimension_count", gguf_u32(4)); },
          {"llama.rope.dimension_count", "partial rotary"});
  refused("scaling.gguf", [](Kv& kv, Tensors&) { set_key(kv, "llama.rope.scaling.type", gguf_string("yarn")); },
          {"llama.rope.scaling.type", "yarn"});
  refused("q2k.gguf",
          [](Kv&, Tensors& t) {
            for (GgufTensorToWrite& x : t) {
              if (x.name == "blk.0.ffn_up.weight") {
                x.ne[0] = 32;
                x.ne[1] = 2;
                x.bytes.assign(36, std::byte{0});
                x.type = static_cast<std::uint32_t>(GgmlType::kIQ4_NL);
              }
            }
          },
          {"blk.0.ffn_up.weight", "IQ4_NL", "not supported"});
  refused("extra.gguf",
          [](Kv&, Tensors& t) { t.push_back({"blk.0.attn_sinks.weight", {4}, 0, std::vector<std::byte>(16)}); },
          {"blk.0.attn_sinks.weight", "not a tensor"});
  refused("shape.gguf",
          [](Kv&, Tensors& t) {
            for (GgufTensorToWrite& x : t) {
              if (x.name == "blk.1.ffn_gate.weight") {
                x.ne[1] -= 1;
                x.bytes.resize(x.bytes.size() - static_cast<std::size_t>(x.ne[0]) * 4);
              }
            }
          },
          {"model.layers.1.mlp.gate_proj.weight", "blk.1.ffn_gate.weight"});
}

TEST(GgufModel, TokenizerFromMetadataRunsTheTokenizerJsonPipeline) {
  const TempDir dir;
  ModelConfig c = tiny_config();
  c.vocab_size = 300;
  c.bos_token_id = 256;
  c.eos_token_ids = {257};
  write_gguf_model(dir / "m.gguf", c, make_random_weights(c, DType::kF32, 1), testing::tiny_gpt2_tokenizer(300, "smollm"));
  const std::optional<Tokenizer> tok = Tokenizer::find(dir / "m.gguf");
  ASSERT_TRUE(tok.has_value());
  EXPECT_EQ(tok->format(), "gguf");
  EXPECT_EQ(tok->bos_id(), 256);
  EXPECT_EQ(tok->eos_id(), 257);
  // Byte b is token b. "hello 42": "hel" merges; the smollm pre-tokenizer isolates each digit and
  // leaves the space alone before them.
  EXPECT_EQ(tok->encode("hello 42", false), (std::vector<std::int32_t>{259, 'l', 'o', ' ', '4', '2'}));
  EXPECT_EQ(tok->encode("hel", true), (std::vector<std::int32_t>{256, 259}));
  EXPECT_EQ(tok->encode("<s>he", false), (std::vector<std::int32_t>{256, 258}));
  EXPECT_EQ(tok->decode(tok->encode("hello 42\n\xC3\xA9", false)), "hello 42\n\xC3\xA9");
}

TEST(GgufModel, RefusesTokenizersItCannotRun) {
  const TempDir dir;
  ModelConfig c = tiny_config();
  c.vocab_size = 300;
  auto with = [&](const std::string& name, std::vector<std::pair<std::string, GgufValue>> kv) {
    write_gguf_model(dir / name, c, make_random_weights(c, DType::kF32, 1), kv);
    return dir / name;
  };
  const auto pre = with("pre.gguf", testing::tiny_gpt2_tokenizer(300, "falcon"));
  expect_input_error([&] { (void)Tokenizer::load(pre); }, {pre.string(), "tokenizer.ggml.pre", "falcon"});
  auto kv = testing::tiny_gpt2_tokenizer(300, "smollm");
  set_key(kv, "tokenizer.ggml.merges", gguf_string_array({"h e", "he zz"}));
  const auto merges = with("merges.gguf", kv);
  expect_input_error([&] { (void)Tokenizer::load(merges); }, {merges.string(), "tokenizer.ggml.merges\"[1]", "zz"});
  kv = testing::tiny_gpt2_tokenizer(300, "smollm");
  set_key(kv, "tokenizer.ggml.model", gguf_string("bert"));
  const auto model = with("model.gguf", kv);
  expect_input_error([&] { (void)Tokenizer::load(model); }, {model.string(), "tokenizer.ggml.model", "bert"});
  kv = testing::tiny_gpt2_tokenizer(299, "smollm");
  const auto count = with("count.gguf", kv);
  expect_input_error([&] { (void)ReferenceModel::load(count); }, {count.string(), "tokenizer.ggml.tokens", "299"});
}

// The file the issue names, read as the config the model card gives.
TEST(GgufModel, SmolLm2ConfigIsTheModelCards) {
  const std::filesystem::path path = testing::smollm2_gguf();
  if (path.empty()) GTEST_SKIP() << testing::kSmolLm2Missing;
  const ModelConfig c = gguf_model_config(GgufFile::open(path));
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int64_t>{2});
  const Tokenizer tok = Tokenizer::load(path);
  EXPECT_EQ(tok.encode("<|im_start|>user\nHi<|im_end|>", true).front(), 1);  // no BOS added: add_bos_token false
}

}  // namespace
}  // namespace kvcheck
