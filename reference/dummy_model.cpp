#include "reference/dummy_model.h"

#include <array>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reference/errors.h"
#include "reference/random_model.h"

namespace kvcheck {
namespace {

constexpr std::array<const char*, 4> kShapes{"llama3-8b", "qwen2.5-7b", "llama2-7b", "kvcheck-tiny"};

ModelConfig base(std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t kv_heads,
                 std::int64_t mlp, std::int64_t vocab, std::int64_t context, double theta, double eps) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.num_hidden_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.intermediate_size = mlp;
  c.vocab_size = vocab;
  c.max_position_embeddings = context;
  c.rope_theta = theta;
  c.rms_norm_eps = eps;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.torch_dtype = "bfloat16";
  return c;
}

}  // namespace

std::span<const char* const> dummy_shape_names() { return kShapes; }

ModelConfig dummy_shape_config(std::string_view shape, std::int64_t layers) {
  if (layers < 0) throw input_error("--dummy-layers", std::to_string(layers), "must be >= 0 (0: the shape's own)");
  ModelConfig c;
  if (shape == "llama3-8b") {
    c = base(32, 4096, 32, 8, 14336, 128256, 8192, 500000.0, 1e-5);
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001};
  } else if (shape == "qwen2.5-7b") {
    c = base(28, 3584, 28, 4, 18944, 152064, 32768, 1000000.0, 1e-6);
    c.family = ModelFamily::kQwen2;
    c.qkv_bias = true;
    c.bos_token_id = 151643;
    c.eos_token_ids = {151645};
  } else if (shape == "llama2-7b") {
    c = base(32, 4096, 32, 32, 11008, 32000, 4096, 10000.0, 1e-5);
  } else if (shape == "kvcheck-tiny") {
    c = base(4, 128, 4, 2, 384, 2048, 512, 10000.0, 1e-5);
    c.tie_word_embeddings = true;
  } else {
    throw input_error("--shape", std::string(shape), "is not a known shape ({})", fmt::join(kShapes, ", "));
  }
  if (layers > 0) c.num_hidden_layers = layers;
  validate_config(c, fmt::format("dummy shape {}", shape));
  return c;
}

ReferenceModel make_dummy_model(const ModelConfig& config, std::string_view shape, std::uint64_t seed) {
  auto weights = std::make_shared<TensorMap>(make_random_weights(config, DType::kBF16, seed));
  return ReferenceModel(config, std::move(weights), fmt::format("dummy:{}", shape));
}

}  // namespace kvcheck
