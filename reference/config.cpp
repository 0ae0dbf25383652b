#include "reference/config.h"

#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "reference/errors.h"

namespace kvcheck {
namespace {

using nlohmann::json;

// Largest accepted size. Keeps products such as num_attention_heads * head_dim far from
// overflowing int64 and every size representable as a 32-bit index.
constexpr std::int64_t kMaxSize = std::numeric_limits<std::int32_t>::max();

struct FamilyInfo {
  ModelFamily family;
  std::string_view model_type;
  std::string_view architecture;
};

constexpr std::array<FamilyInfo, 4> kFamilies = {{
    {ModelFamily::kLlama, "llama", "LlamaForCausalLM"},
    {ModelFamily::kMistral, "mistral", "MistralForCausalLM"},
    {ModelFamily::kQwen2, "qwen2", "Qwen2ForCausalLM"},
    {ModelFamily::kQwen3, "qwen3", "Qwen3ForCausalLM"},
}};

const FamilyInfo& family_info(ModelFamily family) {
  for (const auto& info : kFamilies) {
    if (info.family == family) return info;
  }
  return kFamilies[0];  // unreachable for valid enum values
}

// "string \"4096\"", "number 4096.5", "boolean true", "null", "array", "object".
std::string describe(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return fmt::format("boolean {}", value.get<bool>());
    case json::value_t::string: {
      std::string text = value.dump();
      if (text.size() > 48) text = text.substr(0, 44) + "...\"";
      return "string " + text;
    }
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer " + value.dump();
    case json::value_t::number_float:
      return "number " + value.dump();
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "an unsupported JSON value";
  }
}

// A JSON object with its origin, for typed field access with uniform error messages.
class Fields {
 public:
  Fields(const json& object, std::string origin, std::string prefix = "")
      : object_(object), origin_(std::move(origin)), prefix_(std::move(prefix)) {}

  const std::string& origin() const { return origin_; }
  std::string name(std::string_view key) const { return prefix_ + std::string(key); }

  // The value of `key`, or nullptr when absent.
  const json* find(std::string_view key) const {
    auto it = object_.find(std::string(key));
    return it == object_.end() ? nullptr : &*it;
  }
  // Present and not null.
  const json* find_non_null(std::string_view key) const {
    const json* value = find(key);
    return value == nullptr || value->is_null() ? nullptr : value;
  }

  InputError error(std::string_view key, const std::string& problem) const {
    return input_error(origin_, name(key), "{}", problem);
  }

  std::int64_t required_int(std::string_view key) const {
    const json* value = find(key);
    if (value == nullptr) throw error(key, "missing required field");
    return to_int(*value, name(key));
  }
  std::optional<std::int64_t> optional_int(std::string_view key) const {
    const json* value = find_non_null(key);
    if (value == nullptr) return std::nullopt;
    return to_int(*value, name(key));
  }
  double required_number(std::string_view key) const {
    const json* value = find(key);
    if (value == nullptr) throw error(key, "missing required field");
    return to_number(*value, name(key));
  }
  double optional_number(std::string_view key, double fallback) const {
    const json* value = find_non_null(key);
    return value == nullptr ? fallback : to_number(*value, name(key));
  }
  bool optional_bool(std::string_view key, bool fallback) const {
    const json* value = find_non_null(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) {
      throw input_error(origin_, name(key), "expected a boolean, got {}", describe(*value));
    }
    return value->get<bool>();
  }
  std::optional<std::string> optional_string(std::string_view key) const {
    const json* value = find_non_null(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_string()) {
      throw input_error(origin_, name(key), "expected a string, got {}", describe(*value));
    }
    return value->get<std::string>();
  }

  std::int64_t to_int(const json& value, const std::string& field) const {
    if (value.is_number_integer() && !value.is_number_unsigned()) {
      return value.get<std::int64_t>();
    }
    if (value.is_number_unsigned()) {
      const auto u = value.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw input_error(origin_, field, "integer {} is out of range", u);
      }
      return static_cast<std::int64_t>(u);
    }
    throw input_error(origin_, field, "expected an integer, got {}", describe(value));
  }
  double to_number(const json& value, const std::string& field) const {
    if (!value.is_number()) {  // booleans are not numbers in nlohmann::json
      throw input_error(origin_, field, "expected a number, got {}", describe(value));
    }
    return value.get<double>();
  }

 private:
  const json& object_;
  std::string origin_;
  std::string prefix_;
};

std::string supported_model_types() {
  std::string out;
  for (const auto& info : kFamilies) {
    if (!out.empty()) out += ", ";
    out += info.model_type;
  }
  return out;
}

ModelFamily parse_family(const Fields& fields) {
  if (const json* model_type = fields.find("model_type")) {
    if (!model_type->is_string()) {
      throw input_error(fields.origin(), "model_type", "expected a string, got {}",
                        describe(*model_type));
    }
    const auto text = model_type->get<std::string>();
    for (const auto& info : kFamilies) {
      if (text == info.model_type) return info.family;
    }
    throw input_error(fields.origin(), "model_type", "unsupported model_type \"{}\" (supported: {})",
                      text, supported_model_types());
  }
  // No model_type: fall back to architectures[0].
  const json* architectures = fields.find("architectures");
  if (architectures == nullptr) {
    throw input_error(fields.origin(), "model_type",
                      "missing required field (and no architectures to infer it from; "
                      "supported: {})",
                      supported_model_types());
  }
  if (!architectures->is_array() || architectures->empty() || !(*architectures)[0].is_string()) {
    throw input_error(fields.origin(), "architectures",
                      "expected a non-empty array of strings, got {}", describe(*architectures));
  }
  const auto architecture = (*architectures)[0].get<std::string>();
  for (const auto& info : kFamilies) {
    if (architecture == info.architecture) return info.family;
  }
  std::string supported;
  for (const auto& info : kFamilies) {
    if (!supported.empty()) supported += ", ";
    supported += info.architecture;
  }
  throw input_error(fields.origin(), "architectures[0]",
                    "unsupported architecture \"{}\" and no model_type (supported: {})",
                    architecture, supported);
}

RopeScaling parse_rope_scaling(const Fields& fields) {
  RopeScaling scaling;
  const json* value = fields.find_non_null("rope_scaling");
  if (value == nullptr) return scaling;
  if (!value->is_object()) {
    throw input_error(fields.origin(), "rope_scaling", "expected an object or null, got {}",
                      describe(*value));
  }
  const Fields inner(*value, fields.origin(), "rope_scaling.");
  std::string key = "rope_type";
  const json* type = inner.find_non_null("rope_type");
  if (type == nullptr) {
    key = "type";  // legacy spelling
    type = inner.find_non_null("type");
  }
  if (type == nullptr) throw inner.error("rope_type", "missing required field");
  if (!type->is_string()) {
    throw input_error(fields.origin(), inner.name(key), "expected a string, got {}",
                      describe(*type));
  }
  const auto name = type->get<std::string>();
  if (name == "default") return scaling;  // transformers: same as no scaling
  if (name != "llama3") {
    throw input_error(fields.origin(), inner.name(key),
                      "rope type \"{}\" is unsupported (supported: llama3, or rope_scaling null)",
                      name);
  }
  scaling.type = RopeScaling::Type::kLlama3;
  scaling.factor = inner.required_number("factor");
  scaling.low_freq_factor = inner.required_number("low_freq_factor");
  scaling.high_freq_factor = inner.required_number("high_freq_factor");
  scaling.original_max_position_embeddings =
      inner.required_int("original_max_position_embeddings");
  return scaling;
}

std::vector<std::int64_t> parse_eos(const Fields& fields) {
  std::vector<std::int64_t> ids;
  const json* value = fields.find_non_null("eos_token_id");
  if (value == nullptr) return ids;
  if (value->is_array()) {
    for (std::size_t i = 0; i < value->size(); ++i) {
      ids.push_back(fields.to_int((*value)[i], fmt::format("eos_token_id[{}]", i)));
    }
    return ids;
  }
  if (!value->is_number_integer()) {
    throw input_error(fields.origin(), "eos_token_id",
                      "expected an integer, a list of integers or null, got {}", describe(*value));
  }
  ids.push_back(fields.to_int(*value, "eos_token_id"));
  return ids;
}

void check_positive(std::int64_t value, std::string_view field, const std::string& origin) {
  if (value <= 0) throw input_error(origin, std::string(field), "must be positive, got {}", value);
  if (value > kMaxSize) {
    throw input_error(origin, std::string(field), "is too large ({} > {})", value, kMaxSize);
  }
}

void check_token_id(std::int64_t id, const std::string& field, const ModelConfig& config,
                    const std::string& origin) {
  if (id < 0 || id >= config.vocab_size) {
    throw input_error(origin, field, "token id {} is outside the vocabulary [0, {})", id,
                      config.vocab_size);
  }
}

}  // namespace

std::string_view family_name(ModelFamily family) { return family_info(family).model_type; }

ModelConfig parse_config(const nlohmann::json& json, const std::string& origin) {
  if (!json.is_object()) {
    throw input_error(origin, "(top level)", "expected a JSON object, got {}", describe(json));
  }
  const Fields fields(json, origin);
  ModelConfig config;
  config.family = parse_family(fields);

  config.hidden_size = fields.required_int("hidden_size");
  config.intermediate_size = fields.required_int("intermediate_size");
  config.num_hidden_layers = fields.required_int("num_hidden_layers");
  config.num_attention_heads = fields.required_int("num_attention_heads");
  config.vocab_size = fields.required_int("vocab_size");
  config.max_position_embeddings = fields.required_int("max_position_embeddings");

  config.num_key_value_heads =
      fields.optional_int("num_key_value_heads").value_or(config.num_attention_heads);
  if (auto head_dim = fields.optional_int("head_dim")) {
    config.head_dim = *head_dim;
  } else if (config.family == ModelFamily::kQwen3) {
    config.head_dim = 128;  // Qwen3Config's default, not hidden_size / num_attention_heads
  } else {
    if (config.num_attention_heads <= 0) {
      throw input_error(origin, "num_attention_heads", "must be positive, got {}",
                        config.num_attention_heads);
    }
    config.head_dim = config.hidden_size / config.num_attention_heads;
  }

  config.rms_norm_eps = fields.optional_number("rms_norm_eps", 1e-6);
  config.rope_theta = fields.optional_number("rope_theta", 10000.0);
  config.rope_scaling = parse_rope_scaling(fields);
  config.tie_word_embeddings = fields.optional_bool("tie_word_embeddings", false);

  if (auto act = fields.optional_string("hidden_act"); act && *act != "silu") {
    throw input_error(origin, "hidden_act", "activation \"{}\" is unsupported (supported: silu)",
                      *act);
  }

  switch (config.family) {
    case ModelFamily::kLlama: {
      const bool bias = fields.optional_bool("attention_bias", false);
      config.qkv_bias = bias;
      config.o_bias = bias;
      if (fields.optional_bool("mlp_bias", false)) {
        throw input_error(origin, "mlp_bias", "mlp_bias=true is not supported by the reference");
      }
      break;
    }
    case ModelFamily::kMistral: {
      // transformers' MistralConfig defaults sliding_window to 4096; null disables it.
      const nlohmann::json* window = fields.find("sliding_window");
      if (window == nullptr) {
        config.sliding_window = 4096;
      } else if (window->is_null()) {
        config.sliding_window = 0;
      } else {
        config.sliding_window = fields.to_int(*window, "sliding_window");
      }
      break;
    }
    case ModelFamily::kQwen2: {
      config.qkv_bias = true;
      config.o_bias = false;
      if (fields.optional_bool("use_sliding_window", false)) {
        throw input_error(origin, "use_sliding_window",
                          "use_sliding_window=true is not supported by the reference");
      }
      break;
    }
    case ModelFamily::kQwen3: {
      // Qwen3Config: attention_bias (default false) biases q, k, v and o together. sliding_window only counts when use_sliding_window is true, which no
      // released Qwen3 sets; refused like every window outside Mistral.
      const bool bias = fields.optional_bool("attention_bias", false);
      config.qkv_bias = bias;
      config.o_bias = bias;
      if (fields.optional_bool("use_sliding_window", false)) {
        throw input_error(origin, "use_sliding_window",
                          "use_sliding_window=true is not supported (no released Qwen3 uses it; the "
                          "reference and the engine attend to the whole context)");
      }
      break;
    }
  }

  config.bos_token_id = fields.optional_int("bos_token_id");
  config.eos_token_ids = parse_eos(fields);
  if (auto dtype = fields.optional_string("torch_dtype")) {
    config.torch_dtype = *dtype;
  } else if (auto new_dtype = fields.optional_string("dtype")) {  // transformers >= 4.56
    config.torch_dtype = *new_dtype;
  }

  validate_config(config, origin);
  return config;
}

void validate_config(const ModelConfig& config, const std::string& origin) {
  check_positive(config.hidden_size, "hidden_size", origin);
  check_positive(config.intermediate_size, "intermediate_size", origin);
  check_positive(config.num_hidden_layers, "num_hidden_layers", origin);
  check_positive(config.num_attention_heads, "num_attention_heads", origin);
  check_positive(config.num_key_value_heads, "num_key_value_heads", origin);
  check_positive(config.head_dim, "head_dim", origin);
  check_positive(config.vocab_size, "vocab_size", origin);
  check_positive(config.max_position_embeddings, "max_position_embeddings", origin);

  // Qwen3 states head_dim explicitly (Qwen3-0.6B: 16 heads of 128 over hidden 1024), so its
  // heads need not divide the hidden size.
  if (config.family != ModelFamily::kQwen3 && config.hidden_size % config.num_attention_heads != 0) {
    throw input_error(origin, "num_attention_heads",
                      "num_attention_heads ({}) does not divide hidden_size ({})",
                      config.num_attention_heads, config.hidden_size);
  }
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    throw input_error(origin, "num_key_value_heads",
                      "num_key_value_heads ({}) does not divide num_attention_heads ({})",
                      config.num_key_value_heads, config.num_attention_heads);
  }
  if (config.head_dim % 2 != 0) {
    throw input_error(origin, "head_dim",
                      "must be even (RoPE rotates pairs of dimensions), got {}", config.head_dim);
  }

  if (!(std::isfinite(config.rms_norm_eps) && config.rms_norm_eps > 0.0)) {
    throw input_error(origin, "rms_norm_eps", "must be positive and finite, got {}",
                      config.rms_norm_eps);
  }
  if (!(std::isfinite(config.rope_theta) && config.rope_theta > 0.0)) {
    throw input_error(origin, "rope_theta", "must be positive and finite, got {}",
                      config.rope_theta);
  }

  if (config.rope_scaling.type == RopeScaling::Type::kLlama3) {
    const auto& s = config.rope_scaling;
    if (!(std::isfinite(s.factor) && s.factor >= 1.0)) {
      throw input_error(origin, "rope_scaling.factor", "must be finite and >= 1, got {}",
                        s.factor);
    }
    if (!(std::isfinite(s.low_freq_factor) && s.low_freq_factor > 0.0)) {
      throw input_error(origin, "rope_scaling.low_freq_factor",
                        "must be positive and finite, got {}", s.low_freq_factor);
    }
    if (!(std::isfinite(s.high_freq_factor) && s.high_freq_factor > s.low_freq_factor)) {
      throw input_error(origin, "rope_scaling.high_freq_factor",
                        "must be finite and greater than low_freq_factor ({}), got {}",
                        s.low_freq_factor, s.high_freq_factor);
    }
    check_positive(s.original_max_position_embeddings,
                   "rope_scaling.original_max_position_embeddings", origin);
  }

  if (config.sliding_window < 0) {
    throw input_error(origin, "sliding_window", "must be positive or null, got {}",
                      config.sliding_window);
  }
  if (config.sliding_window != 0 && config.family != ModelFamily::kMistral) {
    throw input_error(origin, "sliding_window",
                      "a sliding window ({}) is only supported for model_type mistral, not {}",
                      config.sliding_window, family_name(config.family));
  }

  // Attention biases each family can express in its config.json.
  switch (config.family) {
    case ModelFamily::kLlama:
      if (config.qkv_bias != config.o_bias) {
        throw input_error(origin, "attention_bias",
                          "llama biases q/k/v and o together (qkv_bias={}, o_bias={})",
                          config.qkv_bias, config.o_bias);
      }
      break;
    case ModelFamily::kMistral:
      if (config.qkv_bias || config.o_bias) {
        throw input_error(origin, "attention_bias", "mistral has no attention biases");
      }
      break;
    case ModelFamily::kQwen2:
      if (!config.qkv_bias || config.o_bias) {
        throw input_error(origin, "attention_bias",
                          "qwen2 always has q/k/v biases and no o bias (qkv_bias={}, o_bias={})",
                          config.qkv_bias, config.o_bias);
      }
      break;
    case ModelFamily::kQwen3:
      if (config.qkv_bias != config.o_bias) {
        throw input_error(origin, "attention_bias",
                          "qwen3 biases q/k/v and o together (qkv_bias={}, o_bias={})",
                          config.qkv_bias, config.o_bias);
      }
      break;
  }


  if (config.bos_token_id) check_token_id(*config.bos_token_id, "bos_token_id", config, origin);
  for (std::size_t i = 0; i < config.eos_token_ids.size(); ++i) {
    check_token_id(config.eos_token_ids[i],
                   config.eos_token_ids.size() == 1 ? std::string("eos_token_id")
                                                    : fmt::format("eos_token_id[{}]", i),
                   config, origin);
  }
}

ModelConfig load_config(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path, ec)) file = path / "config.json";
  const std::string origin = file.string();
  if (!std::filesystem::exists(file, ec)) {
    throw input_error(origin, "config.json", "file not found");
  }
  if (std::filesystem::is_directory(file, ec)) {
    throw input_error(origin, "config.json", "is a directory, not a file");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw input_error(origin, "config.json", "cannot open file for reading");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw input_error(origin, "config.json", "error while reading the file");

  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw input_error(origin, "config.json", "invalid JSON: {}", e.what());
  }
  return parse_config(json, origin);
}

nlohmann::json config_to_json(const ModelConfig& config) {
  const FamilyInfo& info = family_info(config.family);
  nlohmann::json out = nlohmann::json::object();
  out["architectures"] = nlohmann::json::array({std::string(info.architecture)});
  out["model_type"] = std::string(info.model_type);
  out["hidden_act"] = "silu";
  out["hidden_size"] = config.hidden_size;
  out["intermediate_size"] = config.intermediate_size;
  out["num_hidden_layers"] = config.num_hidden_layers;
  out["num_attention_heads"] = config.num_attention_heads;
  out["num_key_value_heads"] = config.num_key_value_heads;
  out["head_dim"] = config.head_dim;
  out["vocab_size"] = config.vocab_size;
  out["max_position_embeddings"] = config.max_position_embeddings;
  out["rms_norm_eps"] = config.rms_norm_eps;
  out["rope_theta"] = config.rope_theta;
  if (config.rope_scaling.type == RopeScaling::Type::kLlama3) {
    out["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", config.rope_scaling.factor},
        {"low_freq_factor", config.rope_scaling.low_freq_factor},
        {"high_freq_factor", config.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", config.rope_scaling.original_max_position_embeddings},
    };
  } else {
    out["rope_scaling"] = nullptr;
  }
  out["tie_word_embeddings"] = config.tie_word_embeddings;
  switch (config.family) {
    case ModelFamily::kLlama:
      out["attention_bias"] = config.qkv_bias;
      out["mlp_bias"] = false;
      break;
    case ModelFamily::kMistral:
      if (config.sliding_window > 0) {
        out["sliding_window"] = config.sliding_window;
      } else {
        out["sliding_window"] = nullptr;
      }
      break;
    case ModelFamily::kQwen2:
      out["use_sliding_window"] = false;
      out["sliding_window"] = nullptr;
      break;
    case ModelFamily::kQwen3:
      out["attention_bias"] = config.qkv_bias;
      out["use_sliding_window"] = false;
      out["sliding_window"] = nullptr;
      break;
  }
  if (config.bos_token_id) {
    out["bos_token_id"] = *config.bos_token_id;
  } else {
    out["bos_token_id"] = nullptr;
  }
  if (config.eos_token_ids.size() == 1) {
    out["eos_token_id"] = config.eos_token_ids.front();
  } else if (config.eos_token_ids.size() > 1) {
    out["eos_token_id"] = config.eos_token_ids;
  }
  if (!config.torch_dtype.empty()) out["torch_dtype"] = config.torch_dtype;
  return out;
}

}  // namespace kvcheck
