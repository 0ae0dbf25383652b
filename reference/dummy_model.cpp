#include "reference/dummy_model.h"

#include <array>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reference/errors.h"
#include "reference/random_model.h"

namespace kvcheck {
namespace {

// One row per shape, the fields of the model's published config.json. head_dim 0: hidden / heads.
struct Shape {
  const char* name;
  ModelFamily family;
  std::int64_t layers, hidden, heads, kv_heads, head_dim, mlp, vocab, context;
  double theta, eps;
  bool tie;
  std::int64_t bos, eos;
  double llama3_factor;  // rope_scaling (rope_type llama3) factor; 0: no rope_scaling
};

// rope_scaling of Llama 3.1 / 3.2: low 1, high 4, original context 8192 (factor per model).
constexpr double kLlama3Low = 1.0, kLlama3High = 4.0;
constexpr std::int64_t kLlama3Original = 8192;

constexpr std::array<Shape, 8> kShapes{{
    // name           family               L   hidden heads kv  d    MLP    vocab   context theta    eps   tie    bos     eos   llama3
    {"llama3-8b", ModelFamily::kLlama, 32, 4096, 32, 8, 0, 14336, 128256, 8192, 500000.0, 1e-5, false, 128000, 128001, 0.0},
    {"qwen2.5-7b", ModelFamily::kQwen2, 28, 3584, 28, 4, 0, 18944, 152064, 32768, 1000000.0, 1e-6, false, 151643, 151645, 0.0},
    {"llama2-7b", ModelFamily::kLlama, 32, 4096, 32, 32, 0, 11008, 32000, 4096, 10000.0, 1e-5, false, 1, 2, 0.0},
    {"kvcheck-tiny", ModelFamily::kLlama, 4, 128, 4, 2, 0, 384, 2048, 512, 10000.0, 1e-5, true, 1, 2, 0.0},
    // Qwen/Qwen2.5-0.5B (base): tied, QKV biases.
    {"qwen2.5-0.5b", ModelFamily::kQwen2, 24, 896, 14, 2, 0, 4864, 151936, 32768, 1000000.0, 1e-6, true, 151643, 151643, 0.0},
    // Qwen/Qwen3-0.6B: head_dim 128 (16 x 128 = 2048 > hidden 1024), tied, q_norm / k_norm.
    {"qwen3-0.6b", ModelFamily::kQwen3, 28, 1024, 16, 8, 128, 3072, 151936, 40960, 1000000.0, 1e-6, true, 151643, 151645, 0.0},
    // HuggingFaceTB/SmolLM2-135M(-Instruct): tied, 9 query / 3 kv heads of 64, 8K context.
    {"smollm2-135m", ModelFamily::kLlama, 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0, 1e-5, true, 1, 2, 0.0},
    // meta-llama/Llama-3.2-1B: tied, llama3 rope scaling factor 32.
    {"llama3.2-1b", ModelFamily::kLlama, 16, 2048, 32, 8, 64, 8192, 128256, 131072, 500000.0, 1e-5, true, 128000, 128001, 32.0},
}};

constexpr std::array<const char*, kShapes.size()> shape_names() {
  std::array<const char*, kShapes.size()> names{};
  for (std::size_t i = 0; i < kShapes.size(); ++i) names[i] = kShapes[i].name;
  return names;
}
constexpr std::array<const char*, kShapes.size()> kShapeNames = shape_names();

ModelConfig config_of(const Shape& s) {
  ModelConfig c;
  c.family = s.family;
  c.num_hidden_layers = s.layers;
  c.hidden_size = s.hidden;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.head_dim > 0 ? s.head_dim : s.hidden / s.heads;
  c.intermediate_size = s.mlp;
  c.vocab_size = s.vocab;
  c.max_position_embeddings = s.context;
  c.rope_theta = s.theta;
  c.rms_norm_eps = s.eps;
  c.tie_word_embeddings = s.tie;
  c.qkv_bias = s.family == ModelFamily::kQwen2;
  c.bos_token_id = s.bos;
  c.eos_token_ids = {s.eos};
  c.torch_dtype = "bfloat16";
  if (s.llama3_factor > 0.0) {
    c.rope_scaling.type = RopeScaling::Type::kLlama3;
    c.rope_scaling.factor = s.llama3_factor;
    c.rope_scaling.low_freq_factor = kLlama3Low;
    c.rope_scaling.high_freq_factor = kLlama3High;
    c.rope_scaling.original_max_position_embeddings = kLlama3Original;
  }
  return c;
}

}  // namespace

std::span<const char* const> dummy_shape_names() { return kShapeNames; }

ModelConfig dummy_shape_config(std::string_view shape, std::int64_t layers) {
  if (layers < 0) throw input_error("--dummy-layers", std::to_string(layers), "must be >= 0 (0: the shape's own)");
  for (const Shape& s : kShapes) {
    if (shape != s.name) continue;
    ModelConfig c = config_of(s);
    if (layers > 0) c.num_hidden_layers = layers;
    validate_config(c, fmt::format("dummy shape {}", shape));
    return c;
  }
  throw input_error("--shape", std::string(shape), "is not a known shape ({})", fmt::join(kShapeNames, ", "));
}

ReferenceModel make_dummy_model(const ModelConfig& config, std::string_view shape, std::uint64_t seed) {
  auto weights = std::make_shared<TensorMap>(make_random_weights(config, DType::kBF16, seed));
  return ReferenceModel(config, std::move(weights), fmt::format("dummy:{}", shape));
}

}  // namespace kvcheck
