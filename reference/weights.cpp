#include "reference/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "reference/errors.h"

namespace kvcheck {

std::string layer_tensor_name(std::int64_t layer, const std::string& suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  const std::int64_t h = c.hidden_size;
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    out.push_back({layer_tensor_name(l, "input_layernorm.weight"), {h}});
    out.push_back({layer_tensor_name(l, "post_attention_layernorm.weight"), {h}});
    out.push_back({layer_tensor_name(l, "self_attn.q_proj.weight"), {c.q_dim(), h}});
    out.push_back({layer_tensor_name(l, "self_attn.k_proj.weight"), {c.kv_dim(), h}});
    out.push_back({layer_tensor_name(l, "self_attn.v_proj.weight"), {c.kv_dim(), h}});
    out.push_back({layer_tensor_name(l, "self_attn.o_proj.weight"), {h, c.q_dim()}});
    if (c.qkv_bias) {
      out.push_back({layer_tensor_name(l, "self_attn.q_proj.bias"), {c.q_dim()}});
      out.push_back({layer_tensor_name(l, "self_attn.k_proj.bias"), {c.kv_dim()}});
      out.push_back({layer_tensor_name(l, "self_attn.v_proj.bias"), {c.kv_dim()}});
    }
    if (c.o_bias) out.push_back({layer_tensor_name(l, "self_attn.o_proj.bias"), {h}});
    if (c.qk_norm()) {
      out.push_back({layer_tensor_name(l, "self_attn.q_norm.weight"), {c.head_dim}});
      out.push_back({layer_tensor_name(l, "self_attn.k_norm.weight"), {c.head_dim}});
    }
    out.push_back({layer_tensor_name(l, "mlp.gate_proj.weight"), {c.intermediate_size, h}});
    out.push_back({layer_tensor_name(l, "mlp.up_proj.weight"), {c.intermediate_size, h}});
    out.push_back({layer_tensor_name(l, "mlp.down_proj.weight"), {h, c.intermediate_size}});
  }
  out.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  return out;
}

void check_tensors(const ModelConfig& config, const TensorSource& source, const std::string& origin) {
  for (const ExpectedTensor& e : expected_tensors(config)) {
    const std::optional<TensorView> t = source.find(e.name);
    if (!t) throw input_error(origin, e.name, "missing tensor (expected shape [{}])", fmt::join(e.shape, ", "));
    const std::string where = source.origin(e.name);
    if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16) {
      throw input_error(where, e.name, "dtype {} is not a float weight dtype (F32, F16 or BF16)", dtype_name(t->dtype));
    }
    if (t->shape != e.shape) {
      throw input_error(where, e.name, "shape [{}] does not match the config ({}), which implies [{}]",
                        fmt::join(t->shape, ", "), origin, fmt::join(e.shape, ", "));
    }
  }
}

std::size_t LayerWeights::bytes() const {
  const auto m = [](const MatrixRMd& x) { return static_cast<std::size_t>(x.size()); };
  const auto r = [](const Eigen::RowVectorXd& x) { return static_cast<std::size_t>(x.size()); };
  return sizeof(double) * (input_norm.size() + post_norm.size() + q_norm.size() + k_norm.size() + m(wq) + m(wk) + m(wv) + m(wo) + r(bq) + r(bk) +
                          r(bv) + r(bo) + m(w_gate) + m(w_up) + m(w_down));
}

ModelWeights::ModelWeights(ModelConfig config, std::shared_ptr<const TensorSource> source, std::string origin,
                           std::size_t max_resident_bytes)
    : config_(std::move(config)),
      source_(std::move(source)),
      origin_(std::move(origin)),
      max_resident_bytes_(max_resident_bytes),
      layers_(static_cast<std::size_t>(config_.num_hidden_layers)) {
  check_tensors(config_, *source_, origin_);
  final_norm_ = vector("model.norm.weight");
}

MatrixRMd ModelWeights::matrix(const std::string& name) const {
  const TensorView t = *source_->find(name);  // presence and shape checked at construction
  MatrixRM m(t.shape[0], t.shape[1]);
  to_float(t, std::span<float>(m.data(), static_cast<std::size_t>(m.size())), source_->origin(name) + ": " + name);
  return m.cast<double>();
}

std::vector<double> ModelWeights::vector(const std::string& name) const {
  const TensorView t = *source_->find(name);
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  to_float(t, v, source_->origin(name) + ": " + name);
  return {v.begin(), v.end()};
}

std::shared_ptr<LayerWeights> ModelWeights::convert_layer(std::int64_t l) const {
  auto w = std::make_shared<LayerWeights>();
  w->input_norm = vector(layer_tensor_name(l, "input_layernorm.weight"));
  w->post_norm = vector(layer_tensor_name(l, "post_attention_layernorm.weight"));
  w->wq = matrix(layer_tensor_name(l, "self_attn.q_proj.weight"));
  w->wk = matrix(layer_tensor_name(l, "self_attn.k_proj.weight"));
  w->wv = matrix(layer_tensor_name(l, "self_attn.v_proj.weight"));
  w->wo = matrix(layer_tensor_name(l, "self_attn.o_proj.weight"));
  const auto row = [this](const std::string& name) {
    const std::vector<double> v = vector(name);
    return Eigen::RowVectorXd(Eigen::Map<const Eigen::RowVectorXd>(v.data(), static_cast<Eigen::Index>(v.size())));
  };
  if (config_.qkv_bias) {
    w->bq = row(layer_tensor_name(l, "self_attn.q_proj.bias"));
    w->bk = row(layer_tensor_name(l, "self_attn.k_proj.bias"));
    w->bv = row(layer_tensor_name(l, "self_attn.v_proj.bias"));
  }
  if (config_.o_bias) w->bo = row(layer_tensor_name(l, "self_attn.o_proj.bias"));
  if (config_.qk_norm()) {
    w->q_norm = vector(layer_tensor_name(l, "self_attn.q_norm.weight"));
    w->k_norm = vector(layer_tensor_name(l, "self_attn.k_norm.weight"));
  }
  w->w_gate = matrix(layer_tensor_name(l, "mlp.gate_proj.weight"));
  w->w_up = matrix(layer_tensor_name(l, "mlp.up_proj.weight"));
  w->w_down = matrix(layer_tensor_name(l, "mlp.down_proj.weight"));
  return w;
}

std::shared_ptr<const LayerWeights> ModelWeights::layer(std::int64_t l) const {
  if (l < 0 || l >= config_.num_hidden_layers) throw std::out_of_range(fmt::format("layer {} out of range", l));
  {
    std::lock_guard lock(mutex_);
    if (layers_[l]) return layers_[l];
  }
  std::shared_ptr<const LayerWeights> w = convert_layer(l);
  std::lock_guard lock(mutex_);
  if (!layers_[l] && resident_bytes_ + w->bytes() <= max_resident_bytes_) {
    layers_[l] = w;
    resident_bytes_ += w->bytes();
  }
  return w;
}

MatrixRMd ModelWeights::embed(std::span<const std::int32_t> tokens) const {
  const std::string name = "model.embed_tokens.weight";
  const TensorView t = *source_->find(name);
  MatrixRM out(static_cast<Eigen::Index>(tokens.size()), config_.hidden_size);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      throw std::out_of_range(fmt::format("embed: token id {} outside [0, {})", tokens[i], config_.vocab_size));
    }
    rows_to_float(t, tokens[i],
                  std::span<float>(out.row(static_cast<Eigen::Index>(i)).data(), static_cast<std::size_t>(out.cols())),
                  source_->origin(name) + ": " + name);
  }
  return out.cast<double>();
}

std::shared_ptr<const MatrixRMd> ModelWeights::lm_head() const {
  {
    std::lock_guard lock(mutex_);
    if (lm_head_) return lm_head_;
  }
  auto m = std::make_shared<const MatrixRMd>(
      matrix(config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"));
  const std::size_t bytes = sizeof(double) * static_cast<std::size_t>(m->size());
  std::lock_guard lock(mutex_);
  if (!lm_head_ && resident_bytes_ + bytes <= max_resident_bytes_) {
    lm_head_ = m;
    resident_bytes_ += bytes;
  }
  return m;
}

std::size_t ModelWeights::resident_bytes() const {
  std::lock_guard lock(mutex_);
  return resident_bytes_;
}

}  // namespace kvcheck
