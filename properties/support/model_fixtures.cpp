#include "properties/support/model_fixtures.h"

#include <algorithm>
#include <cstdlib>

#include "properties/support/test_support.h"
#include "reference/random_model.h"

namespace kvcheck::testing {

ModelConfig tiny_config(const TinyShape& s) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.vocab_size = s.vocab;
  c.max_position_embeddings = s.max_positions;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.torch_dtype = "float32";
  return c;
}

ModelConfig tiny_qwen3_config() {
  TinyShape shape;
  shape.hidden = 48;
  shape.head_dim = 16;
  shape.vocab = 96;
  ModelConfig c = tiny_config(shape);
  c.family = ModelFamily::kQwen3;
  c.tie_word_embeddings = true;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  return c;
}

std::filesystem::path fixture_tokenizer_dir(const std::string& name) {
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv("KVCHECK_TOKENIZERS")) dirs.push_back(std::filesystem::path(env) / name);
  dirs.push_back(source_path("datasets/tokenizers/" + name));
  dirs.push_back(source_path("datasets/tokenizers/fetched/" + name));
  for (const auto& dir : dirs) {
    if (std::filesystem::exists(dir / "tokenizer.json")) return dir;
  }
  return {};
}

std::filesystem::path smollm2_gguf() {
  constexpr const char* kFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
  std::error_code ec;
  if (const char* env = std::getenv("KVCHECK_MODELS"); env != nullptr && *env != '\0') {
    const std::filesystem::path p = std::filesystem::path(env) / kFile;
    if (std::filesystem::exists(p, ec)) return p;
  }
  const std::filesystem::path p = source_path("datasets/models/fetched") / kFile;
  return std::filesystem::exists(p, ec) ? p : std::filesystem::path();
}

// A small byte-level vocabulary in GGUF metadata: the 256 byte symbols, two merges, two specials.
std::vector<std::pair<std::string, GgufValue>> tiny_gpt2_tokenizer(std::int64_t vocab, const std::string& pre) {
  std::vector<std::string> tokens;
  // GPT-2's byte-to-unicode table: printable bytes map to themselves, the rest to U+0100 onwards.
  std::vector<int> printable;
  for (int b = '!'; b <= '~'; ++b) printable.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) printable.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) printable.push_back(b);
  auto utf8 = [](int cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool is_printable = std::find(printable.begin(), printable.end(), b) != printable.end();
    tokens.push_back(utf8(is_printable ? b : 256 + extra++));
  }
  tokens.push_back("<s>");
  tokens.push_back("</s>");
  tokens.push_back("he");
  tokens.push_back("hel");
  while (static_cast<std::int64_t>(tokens.size()) < vocab) tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]");
  std::vector<std::int32_t> types(tokens.size(), 1);
  types[256] = 3;
  types[257] = 3;
  for (std::size_t i = 260; i < tokens.size(); ++i) types[i] = 4;
  return {{"tokenizer.ggml.model", gguf_string("gpt2")},
          {"tokenizer.ggml.pre", gguf_string(pre)},
          {"tokenizer.ggml.tokens", gguf_string_array(tokens)},
          {"tokenizer.ggml.token_type", gguf_i32_array(types)},
          {"tokenizer.ggml.merges", gguf_string_array({"h e", "he l"})},
          {"tokenizer.ggml.add_bos_token", gguf_bool(true)}};
}

ReferenceModel tiny_model(const ModelConfig& config, std::uint64_t seed, DType dtype, const LoadOptions& options) {
  auto weights = std::make_shared<TensorMap>(make_random_weights(config, dtype, seed));
  return ReferenceModel(config, std::move(weights), "<tiny model>", options);
}

ReferenceModel tiny_model_edited(const ModelConfig& config, std::uint64_t seed, const std::string& name,
                                 const std::function<void(std::vector<float>&)>& edit) {
  auto weights = std::make_shared<TensorMap>(make_random_weights(config, DType::kF32, seed));
  const TensorView t = *weights->find(name);
  std::vector<float> values(static_cast<std::size_t>(t.numel()));
  to_float(t, values, name);
  edit(values);
  weights->add_float(name, DType::kF32, t.shape, values);
  return ReferenceModel(config, std::move(weights), "<tiny model>");
}

std::vector<std::int32_t> test_tokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(n));
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (auto& t : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t = static_cast<std::int32_t>(x % static_cast<std::uint64_t>(vocab));
  }
  return out;
}

}  // namespace kvcheck::testing
