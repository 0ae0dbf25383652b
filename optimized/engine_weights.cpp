#include "optimized/engine_weights.h"

#include <cmath>
#include <fmt/format.h>
#include <string>

#include "reference/errors.h"
#include "reference/layers.h"
#include "reference/weights.h"

namespace kvcheck {
namespace {

class WeightViews {
 public:
  explicit WeightViews(const TensorSource& source) : source_(source) {}

  // The 2-D tensor `name` in place: its Q8_0 / Q4_1 blocks where the source keeps them (a GGUF
  // file), else its elements. Shapes and dtypes were checked when the model loaded
  // (check_tensors); the dtype is checked again here because the engine reads the bytes itself.
  WeightMatrix matrix(const std::string& name) const {
    if (const std::optional<BlockTensorView> b = source_.find_blocks(name)) {
      const std::optional<WeightDType> dtype = b->format == "Q8_0"   ? std::optional(WeightDType::kQ8_0)
                                               : b->format == "Q4_1" ? std::optional(WeightDType::kQ4_1)
                                                                     : std::nullopt;
      if (dtype && b->shape.size() == 2 && b->shape[1] % weight_block_elements(*dtype) == 0 &&
          static_cast<std::int64_t>(b->bytes.size()) == weight_row_bytes(*dtype, b->shape[0] * b->shape[1])) {
        return WeightMatrix{b->bytes.data(), *dtype, b->shape[0], b->shape[1]};
      }
    }
    const TensorView t = get(name);
    if (t.shape.size() != 2) {
      throw input_error(source_.origin(name), name, "expected a 2-D weight, got {}-D", t.shape.size());
    }
    WeightMatrix m;
    m.data = t.bytes.data();
    m.dtype = dtype(t, name);
    m.rows = t.shape[0];
    m.cols = t.shape[1];
    return m;
  }

  std::vector<float> vector(const std::string& name) const {
    const TensorView t = get(name);
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    to_float(t, v, source_.origin(name) + ": " + name);
    return v;
  }

  DenseWeight dense(const std::string& weight, const std::string& bias) const {
    DenseWeight d;
    d.w = matrix(weight);
    if (!bias.empty()) d.bias = vector(bias);
    return d;
  }

 private:
  TensorView get(const std::string& name) const {
    const std::optional<TensorView> t = source_.find(name);
    if (!t) throw input_error(source_.origin(name), name, "missing tensor");
    return *t;
  }

  WeightDType dtype(const TensorView& t, const std::string& name) const {
    switch (t.dtype) {
      case DType::kF32: return WeightDType::kF32;
      case DType::kF16: return WeightDType::kF16;
      case DType::kBF16: return WeightDType::kBF16;
      default:
        throw input_error(source_.origin(name), name, "dtype {} is not a float weight dtype (F32, F16 or BF16)",
                          dtype_name(t.dtype));
    }
  }

  const TensorSource& source_;
};

std::int64_t dense_bytes(const DenseWeight& d) {
  return d.w.bytes() + static_cast<std::int64_t>(d.bias.size()) * 4;
}

}  // namespace

std::int64_t EngineWeights::bytes() const {
  std::int64_t n = embedding.bytes() + (config.tie_word_embeddings ? 0 : dense_bytes(lm_head));
  for (const EngineLayer& l : layers) {
    n += dense_bytes(l.q) + dense_bytes(l.k) + dense_bytes(l.v) + dense_bytes(l.o) + dense_bytes(l.gate) +
         dense_bytes(l.up) + dense_bytes(l.down);
  }
  return n;
}

EngineWeights load_engine_weights(const ReferenceModel& model) {
  const ModelConfig& c = model.config();
  if (c.sliding_window > 0) {
    throw InputError(fmt::format("{}: sliding_window {} is not supported by the optimized engine (its paged "
                                 "decode attention attends to every kept token); use the reference",
                                 model.origin(), c.sliding_window));
  }
  EngineWeights e;
  e.config = c;
  e.source = model.weights().shared_source();
  const WeightViews views(*e.source);
  e.embedding = views.matrix("model.embed_tokens.weight");
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto name = [l](const char* suffix) { return layer_tensor_name(l, suffix); };
    const auto bias = [&](bool present, const char* suffix) { return present ? name(suffix) : std::string(); };
    EngineLayer el;
    el.input_norm = views.vector(name("input_layernorm.weight"));
    el.post_norm = views.vector(name("post_attention_layernorm.weight"));
    if (c.qk_norm()) {
      el.q_norm = views.vector(name("self_attn.q_norm.weight"));
      el.k_norm = views.vector(name("self_attn.k_norm.weight"));
    }
    el.q = views.dense(name("self_attn.q_proj.weight"), bias(c.qkv_bias, "self_attn.q_proj.bias"));
    el.k = views.dense(name("self_attn.k_proj.weight"), bias(c.qkv_bias, "self_attn.k_proj.bias"));
    el.v = views.dense(name("self_attn.v_proj.weight"), bias(c.qkv_bias, "self_attn.v_proj.bias"));
    el.o = views.dense(name("self_attn.o_proj.weight"), bias(c.o_bias, "self_attn.o_proj.bias"));
    el.gate = views.dense(name("mlp.gate_proj.weight"), "");
    el.up = views.dense(name("mlp.up_proj.weight"), "");
    el.down = views.dense(name("mlp.down_proj.weight"), "");
    e.layers.push_back(std::move(el));
  }
  e.final_norm = views.vector("model.norm.weight");
  // A tied head reads the embedding's bytes: no copy.
  e.lm_head.w = c.tie_word_embeddings ? e.embedding : views.matrix("lm_head.weight");
  // RoPE angles in double, as the reference computes them, rounded to float once.
  const std::vector<double> inv_freq = rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling);
  const std::int64_t half = c.head_dim / 2;
  e.rope_cos.resize(static_cast<std::size_t>(c.max_position_embeddings * half));
  e.rope_sin.resize(e.rope_cos.size());
  for (std::int64_t p = 0; p < c.max_position_embeddings; ++p) {
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[static_cast<std::size_t>(i)];
      e.rope_cos[static_cast<std::size_t>(p * half + i)] = static_cast<float>(std::cos(angle));
      e.rope_sin[static_cast<std::size_t>(p * half + i)] = static_cast<float>(std::sin(angle));
    }
  }
  return e;
}

}  // namespace kvcheck
