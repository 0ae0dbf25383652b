// Hugging Face config.json of the Llama family (model_type "llama", "mistral", "qwen2", "qwen3").
//
// Fields follow the transformers configuration classes; optional fields take the defaults those
// classes give them. Every problem is an InputError naming the file and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvcheck {

enum class ModelFamily { kLlama, kMistral, kQwen2, kQwen3 };

// rope_scaling: absent (plain RoPE) or {"rope_type": "llama3", ...} (Llama 3.1/3.2).
struct RopeScaling {
  enum class Type { kNone, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kLlama;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  std::int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads (qwen3: 128)
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;    // Qwen2 always; Llama and Qwen3 when attention_bias is true
  bool o_bias = false;      // Llama and Qwen3 when attention_bias is true
  std::int64_t sliding_window = 0;  // 0: full causal attention (Mistral may set one)
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;  // eos_token_id may be one id or a list
  std::string torch_dtype;                  // informational ("bfloat16", "float32", ...)

  std::int64_t q_dim() const { return num_attention_heads * head_dim; }
  std::int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  std::int64_t group_size() const { return num_attention_heads / num_key_value_heads; }
  // Qwen3: every q and k head goes through an RMSNorm of its own (self_attn.q_norm / k_norm,
  // [head_dim], eps rms_norm_eps) after the projection and before RoPE.
  bool qk_norm() const { return family == ModelFamily::kQwen3; }
};

std::string_view family_name(ModelFamily family);  // "llama", "mistral", "qwen2", "qwen3"

// Parses and validates; `origin` names the file in error messages.
ModelConfig parse_config(const nlohmann::json& json, const std::string& origin);
// Reads `path` (a config.json, or a directory holding one) and parses it.
ModelConfig load_config(const std::filesystem::path& path);
// Checks relations between fields (heads divide hidden size, kv heads divide heads, positive
// sizes, ...). parse_config calls it; make-model calls it before writing anything.
void validate_config(const ModelConfig& config, const std::string& origin);
// The HF config.json for `config`, readable by transformers and by parse_config.
nlohmann::json config_to_json(const ModelConfig& config);

}  // namespace kvcheck
