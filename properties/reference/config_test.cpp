// config.json parsing, defaults, validation and round trip (reference/config.h). Over 600 lines:
// one known-answer test per published family and one per refused field, all built on the config
// fixtures at the top; they stay together so a new field's accept and refuse cases sit side by side.
#include "reference/config.h"

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "properties/support/test_support.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;

using nlohmann::json;
using testing::TempDir;
using testing::write_file;

// Llama-3.2-1B-Instruct's config.json as published.
json llama32_1b() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": false,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": false,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
      "factor": 32.0,
      "high_freq_factor": 4.0,
      "low_freq_factor": 1.0,
      "original_max_position_embeddings": 8192,
      "rope_type": "llama3"
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": true,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0",
    "use_cache": true,
    "vocab_size": 128256
  })");
}

// Mistral-7B-v0.1's config.json.
json mistral_7b() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": false,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.34.0.dev0",
    "use_cache": true,
    "vocab_size": 32000
  })");
}

// Qwen2.5-0.5B's config.json.
json qwen25_05b() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 24,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": true,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1",
    "use_cache": true,
    "use_sliding_window": false,
    "vocab_size": 151936
  })");
}

// Qwen3-0.6B's config.json as published: head_dim 128 while hidden / heads is 64.
json qwen3_06b() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": false,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": null,
    "rope_theta": 1000000,
    "sliding_window": null,
    "tie_word_embeddings": true,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": true,
    "use_sliding_window": false,
    "vocab_size": 151936
  })");
}

// Only the required fields.
json minimal_llama() {
  return json{{"model_type", "llama"},         {"hidden_size", 64},
              {"intermediate_size", 128},      {"num_hidden_layers", 2},
              {"num_attention_heads", 4},      {"vocab_size", 512},
              {"max_position_embeddings", 256}};
}

const std::vector<std::string> kRequiredFields = {
    "hidden_size", "intermediate_size",       "num_hidden_layers", "num_attention_heads",
    "vocab_size",  "max_position_embeddings"};

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings,
            b.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.o_bias, b.o_bias);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  EXPECT_EQ(a.torch_dtype, b.torch_dtype);
}

// Writes `config` as config.json in `dir`, loads it, and expects an InputError naming the file
// and every needle.
void expect_load_error(const TempDir& dir, const json& config,
                       const std::vector<std::string>& needles) {
  const auto file = dir / "config.json";
  write_file(file, config.dump(2));
  std::vector<std::string> all = needles;
  all.push_back(file.string());
  expect_input_error([&] { (void)load_config(file); }, all);
}

TEST(ConfigTest, ParsesLlama32_1B) {
  const ModelConfig c = parse_config(llama32_1b(), "Llama-3.2-1B/config.json");
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_hidden_layers, 16);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.bos_token_id, std::optional<std::int64_t>(128000));
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.q_dim(), 2048);
  EXPECT_EQ(c.kv_dim(), 512);
  EXPECT_EQ(c.group_size(), 4);
  EXPECT_EQ(family_name(c.family), "llama");
}

TEST(ConfigTest, ParsesMistral7B) {
  const ModelConfig c = parse_config(mistral_7b(), "Mistral-7B-v0.1/config.json");
  EXPECT_EQ(c.family, ModelFamily::kMistral);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.bos_token_id, std::optional<std::int64_t>(1));
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(family_name(c.family), "mistral");
}

TEST(ConfigTest, ParsesQwen25_05B) {
  const ModelConfig c = parse_config(qwen25_05b(), "Qwen2.5-0.5B/config.json");
  EXPECT_EQ(c.family, ModelFamily::kQwen2);
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.intermediate_size, 4864);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.num_attention_heads, 14);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.sliding_window, 0);  // use_sliding_window is false
  EXPECT_EQ(c.bos_token_id, std::optional<std::int64_t>(151643));
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int64_t>{151643}));
  EXPECT_EQ(c.group_size(), 7);
  EXPECT_EQ(family_name(c.family), "qwen2");
}

TEST(ConfigTest, ParsesQwen3_06B) {
  const ModelConfig c = parse_config(qwen3_06b(), "Qwen3-0.6B/config.json");
  EXPECT_EQ(c.family, ModelFamily::kQwen3);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 2048);  // wider than the hidden size
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_TRUE(c.qk_norm());
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.bos_token_id, std::optional<std::int64_t>(151643));
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int64_t>{151645}));
  EXPECT_EQ(family_name(c.family), "qwen3");
  EXPECT_FALSE(parse_config(qwen25_05b(), "q").qk_norm());
  EXPECT_FALSE(parse_config(llama32_1b(), "l").qk_norm());
}

TEST(ConfigTest, Qwen3DefaultsFollowQwen3Config) {
  // Qwen3Config: head_dim 128 when absent (not hidden / heads), attention_bias false; true biases
  // q, k, v and o together.
  json j = qwen3_06b();
  j.erase("head_dim");
  j.erase("attention_bias");
  const ModelConfig c = parse_config(j, "q3");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.qkv_bias);
  j["attention_bias"] = true;
  const ModelConfig biased = parse_config(j, "q3");
  EXPECT_TRUE(biased.qkv_bias);
  EXPECT_TRUE(biased.o_bias);
  // Heads need not divide the hidden size when head_dim is explicit.
  j["num_attention_heads"] = 24;
  j["num_key_value_heads"] = 8;
  EXPECT_EQ(parse_config(j, "q3").q_dim(), 24 * 128);
}

TEST(ConfigTest, Qwen3SlidingWindowIsRefusedByName) {
  TempDir dir;
  json j = qwen3_06b();
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  expect_load_error(dir, j, {"use_sliding_window", "not supported"});
}

TEST(ConfigTest, AppliesTransformersDefaults) {
  const ModelConfig c = parse_config(minimal_llama(), "minimal/config.json");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_TRUE(c.torch_dtype.empty());
}

TEST(ConfigTest, NullOptionalFieldsTakeDefaults) {
  json j = minimal_llama();
  j["num_key_value_heads"] = nullptr;
  j["head_dim"] = nullptr;
  j["rope_scaling"] = nullptr;
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  const ModelConfig c = parse_config(j, "nulls/config.json");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(ConfigTest, MistralNullSlidingWindowMeansFullAttention) {
  json j = mistral_7b();
  j["sliding_window"] = nullptr;  // Mistral-7B-v0.2 and later
  EXPECT_EQ(parse_config(j, "m/config.json").sliding_window, 0);
}

TEST(ConfigTest, LlamaIgnoresSlidingWindow) {
  json j = minimal_llama();
  j["sliding_window"] = 4096;
  EXPECT_EQ(parse_config(j, "l/config.json").sliding_window, 0);
}

TEST(ConfigTest, LlamaAttentionBiasSetsBothBiases) {
  json j = minimal_llama();
  j["attention_bias"] = true;
  const ModelConfig c = parse_config(j, "bias/config.json");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
}

TEST(ConfigTest, InfersFamilyFromArchitectures) {
  for (const auto& [arch, family] :
       std::vector<std::pair<std::string, ModelFamily>>{{"LlamaForCausalLM", ModelFamily::kLlama},
                                                        {"MistralForCausalLM", ModelFamily::kMistral},
                                                        {"Qwen2ForCausalLM", ModelFamily::kQwen2}}) {
    json j = minimal_llama();
    j.erase("model_type");
    j["architectures"] = json::array({arch});
    EXPECT_EQ(parse_config(j, "arch/config.json").family, family) << arch;
  }
}

TEST(ConfigTest, LegacyRopeScalingTypeKey) {
  json j = llama32_1b();
  j["rope_scaling"].erase("rope_type");
  j["rope_scaling"]["type"] = "llama3";
  EXPECT_EQ(parse_config(j, "legacy/config.json").rope_scaling.type, RopeScaling::Type::kLlama3);
}

TEST(ConfigTest, LoadsFromDirectoryOrFile) {
  TempDir dir;
  write_file(dir / "config.json", qwen25_05b().dump(2));
  expect_same(load_config(dir.path()), parse_config(qwen25_05b(), "x"));
  expect_same(load_config(dir / "config.json"), parse_config(qwen25_05b(), "x"));
}

TEST(ConfigTest, RoundTripsThroughJson) {
  json mistral_no_window = mistral_7b();
  mistral_no_window["sliding_window"] = nullptr;
  json llama_bias = minimal_llama();
  llama_bias["attention_bias"] = true;
  llama_bias["eos_token_id"] = 7;
  llama_bias["rms_norm_eps"] = 1.234567890123e-7;
  for (const json& source :
       {llama32_1b(), mistral_7b(), qwen25_05b(), qwen3_06b(), minimal_llama(), mistral_no_window, llama_bias}) {
    const ModelConfig original = parse_config(source, "source/config.json");
    const json written = config_to_json(original);
    SCOPED_TRACE(written.dump());
    expect_same(parse_config(written, "written/config.json"), original);
    // Through text, as make-model writes it.
    expect_same(parse_config(json::parse(written.dump(2)), "text/config.json"), original);
  }
}

TEST(ConfigTest, WritesTransformersShapedJson) {
  const json l = config_to_json(parse_config(llama32_1b(), "l"));
  EXPECT_EQ(l["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(l["model_type"], "llama");
  EXPECT_EQ(l["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(l["rope_scaling"]["factor"], 32.0);
  EXPECT_EQ(l["rope_scaling"]["original_max_position_embeddings"], 8192);
  EXPECT_EQ(l["eos_token_id"], json::array({128001, 128008, 128009}));
  EXPECT_EQ(l["attention_bias"], false);
  EXPECT_EQ(l["torch_dtype"], "bfloat16");
  EXPECT_EQ(l["head_dim"], 64);
  EXPECT_TRUE(l["hidden_size"].is_number_integer());

  const json m = config_to_json(parse_config(mistral_7b(), "m"));
  EXPECT_EQ(m["architectures"], json::array({"MistralForCausalLM"}));
  EXPECT_EQ(m["eos_token_id"], 2);  // one id: an int, not a list
  EXPECT_EQ(m["sliding_window"], 4096);
  EXPECT_TRUE(m["rope_scaling"].is_null());

  const json q = config_to_json(parse_config(qwen25_05b(), "q"));
  EXPECT_EQ(q["architectures"], json::array({"Qwen2ForCausalLM"}));
  EXPECT_EQ(q["use_sliding_window"], false);

  const json q3 = config_to_json(parse_config(qwen3_06b(), "q3"));
  EXPECT_EQ(q3["architectures"], json::array({"Qwen3ForCausalLM"}));
  EXPECT_EQ(q3["model_type"], "qwen3");
  EXPECT_EQ(q3["head_dim"], 128);
  EXPECT_EQ(q3["attention_bias"], false);
  EXPECT_EQ(q3["use_sliding_window"], false);

  const json minimal = config_to_json(parse_config(minimal_llama(), "min"));
  EXPECT_FALSE(minimal.contains("eos_token_id"));
  EXPECT_FALSE(minimal.contains("torch_dtype"));
}

TEST(ConfigTest, MissingRequiredField) {
  TempDir dir;
  for (const auto& field : kRequiredFields) {
    SCOPED_TRACE(field);
    json j = llama32_1b();
    j.erase(field);
    expect_load_error(dir, j, {field, "missing required field"});
  }
}

TEST(ConfigTest, MissingModelTypeAndArchitectures) {
  TempDir dir;
  json j = minimal_llama();
  j.erase("model_type");
  expect_load_error(dir, j, {"model_type", "missing"});
}

TEST(ConfigTest, StringForIntegerField) {
  TempDir dir;
  json j = llama32_1b();
  j["hidden_size"] = "4096";
  expect_load_error(dir, j, {"hidden_size", "expected an integer", "string \"4096\""});
}

TEST(ConfigTest, FloatForIntegerField) {
  TempDir dir;
  json j = llama32_1b();
  j["num_hidden_layers"] = 16.5;
  expect_load_error(dir, j, {"num_hidden_layers", "expected an integer", "16.5"});
}

TEST(ConfigTest, BoolForIntegerField) {
  TempDir dir;
  json j = llama32_1b();
  j["vocab_size"] = true;
  expect_load_error(dir, j, {"vocab_size", "expected an integer", "boolean"});
}

TEST(ConfigTest, WrongTypeForOptionalFields) {
  TempDir dir;
  {
    json j = llama32_1b();
    j["tie_word_embeddings"] = 1;
    expect_load_error(dir, j, {"tie_word_embeddings", "expected a boolean"});
  }
  {
    json j = llama32_1b();
    j["rms_norm_eps"] = "1e-5";
    expect_load_error(dir, j, {"rms_norm_eps", "expected a number"});
  }
  {
    json j = llama32_1b();
    j["eos_token_id"] = json::array({128001, "x"});
    expect_load_error(dir, j, {"eos_token_id[1]", "expected an integer"});
  }
  {
    json j = llama32_1b();
    j["rope_scaling"] = "llama3";
    expect_load_error(dir, j, {"rope_scaling", "expected an object"});
  }
}

TEST(ConfigTest, NonPositiveSize) {
  TempDir dir;
  for (const auto& field : kRequiredFields) {
    SCOPED_TRACE(field);
    json j = minimal_llama();
    j[field] = 0;
    expect_load_error(dir, j, {field});
  }
  json j = minimal_llama();
  j["num_key_value_heads"] = -2;
  expect_load_error(dir, j, {"num_key_value_heads", "must be positive"});
}

TEST(ConfigTest, HeadsNotDividingHiddenSize) {
  TempDir dir;
  json j = llama32_1b();
  j["num_attention_heads"] = 24;
  j["num_key_value_heads"] = 8;
  expect_load_error(dir, j,
                    {"num_attention_heads", "num_attention_heads (24) does not divide hidden_size (2048)"});
}

TEST(ConfigTest, KvHeadsNotDividingHeads) {
  TempDir dir;
  json j = llama32_1b();
  j["num_key_value_heads"] = 6;
  expect_load_error(dir, j,
                    {"num_key_value_heads",
                     "num_key_value_heads (6) does not divide num_attention_heads (32)"});
}

TEST(ConfigTest, UnsupportedModelType) {
  TempDir dir;
  json j = llama32_1b();
  j["model_type"] = "gpt2";
  expect_load_error(dir, j, {"model_type", "gpt2", "llama", "mistral", "qwen2", "qwen3"});
}

TEST(ConfigTest, UnsupportedArchitecture) {
  TempDir dir;
  json j = minimal_llama();
  j.erase("model_type");
  j["architectures"] = json::array({"GPT2LMHeadModel"});
  expect_load_error(dir, j, {"architectures", "GPT2LMHeadModel"});
}

TEST(ConfigTest, UnsupportedRopeType) {
  TempDir dir;
  for (const std::string type : {"linear", "dynamic", "yarn", "longrope"}) {
    SCOPED_TRACE(type);
    json j = llama32_1b();
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 2.0}};
    expect_load_error(dir, j, {"rope_scaling.rope_type", type, "unsupported"});
    // Legacy spelling: {"type": ...}.
    j["rope_scaling"] = {{"type", type}, {"factor", 2.0}};
    expect_load_error(dir, j, {"rope_scaling.type", type, "unsupported"});
  }
}

TEST(ConfigTest, Llama3RopeScalingNeedsItsFields) {
  TempDir dir;
  for (const std::string field :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    SCOPED_TRACE(field);
    json j = llama32_1b();
    j["rope_scaling"].erase(field);
    expect_load_error(dir, j, {"rope_scaling." + field, "missing required field"});
  }
}

TEST(ConfigTest, Llama3RopeScalingFactorsMustBeSane) {
  TempDir dir;
  {
    json j = llama32_1b();
    j["rope_scaling"]["factor"] = 0.5;
    expect_load_error(dir, j, {"rope_scaling.factor"});
  }
  {
    json j = llama32_1b();
    j["rope_scaling"]["low_freq_factor"] = 0.0;
    expect_load_error(dir, j, {"rope_scaling.low_freq_factor"});
  }
  {
    json j = llama32_1b();
    j["rope_scaling"]["high_freq_factor"] = 1.0;  // equal to low_freq_factor
    expect_load_error(dir, j, {"rope_scaling.high_freq_factor"});
  }
}

TEST(ConfigTest, OddHeadDim) {
  TempDir dir;
  json j = llama32_1b();
  j["head_dim"] = 63;
  expect_load_error(dir, j, {"head_dim", "even", "63"});
}

TEST(ConfigTest, BadNormAndRopeConstants) {
  TempDir dir;
  {
    json j = llama32_1b();
    j["rms_norm_eps"] = 0.0;
    expect_load_error(dir, j, {"rms_norm_eps"});
  }
  {
    json j = llama32_1b();
    j["rope_theta"] = -1.0;
    expect_load_error(dir, j, {"rope_theta"});
  }
}

TEST(ConfigTest, TokenIdsMustBeInVocabulary) {
  TempDir dir;
  {
    json j = llama32_1b();
    j["bos_token_id"] = 128256;
    expect_load_error(dir, j, {"bos_token_id", "128256"});
  }
  {
    json j = llama32_1b();
    j["eos_token_id"] = json::array({128001, -1});
    expect_load_error(dir, j, {"eos_token_id[1]", "-1"});
  }
}

TEST(ConfigTest, QwenSlidingWindowIsRejected) {
  TempDir dir;
  json j = qwen25_05b();
  j["use_sliding_window"] = true;
  expect_load_error(dir, j,
                    {"use_sliding_window", "use_sliding_window=true is not supported by the reference"});
}

TEST(ConfigTest, ValidateRejectsUnrepresentableConfigs) {
  ModelConfig c = parse_config(minimal_llama(), "m");
  c.sliding_window = 128;  // only Mistral has a sliding window
  expect_input_error([&] { validate_config(c, "made/config.json"); },
                     {"made/config.json", "sliding_window"});
  c = parse_config(qwen25_05b(), "q");
  c.qkv_bias = false;
  expect_input_error([&] { validate_config(c, "made/config.json"); },
                     {"made/config.json", "attention_bias"});
}

TEST(ConfigTest, TopLevelMustBeObject) {
  TempDir dir;
  expect_load_error(dir, json::array({1, 2}), {"expected a JSON object"});
}

TEST(ConfigTest, InvalidJsonFile) {
  TempDir dir;
  const auto file = dir / "config.json";
  write_file(file, "{\"hidden_size\": 2048,,}");
  expect_input_error([&] { (void)load_config(file); }, {file.string(), "config.json", "invalid JSON"});
  expect_input_error([&] { (void)load_config(dir.path()); }, {file.string(), "invalid JSON"});
}

TEST(ConfigTest, MissingConfigFile) {
  TempDir dir;
  const auto file = dir / "config.json";
  expect_input_error([&] { (void)load_config(dir.path()); }, {file.string(), "config.json", "not found"});
  const auto other = dir / "nope.json";
  expect_input_error([&] { (void)load_config(other); }, {other.string(), "not found"});
}

}  // namespace
}  // namespace kvcheck
