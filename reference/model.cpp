#include "reference/model.h"

#include <fmt/format.h>

#include "reference/errors.h"
#include "reference/gguf.h"
#include "reference/gguf_model.h"
#include "reference/layers.h"
#include "reference/safetensors.h"

namespace kvcheck {

KVCache::KVCache(const ModelConfig& config, std::int64_t capacity) : capacity_(capacity) {
  k_.assign(static_cast<std::size_t>(config.num_hidden_layers), MatrixRMd(capacity, config.kv_dim()));
  v_.assign(static_cast<std::size_t>(config.num_hidden_layers), MatrixRMd(capacity, config.kv_dim()));
}

ReferenceModel ReferenceModel::load(const std::filesystem::path& dir, const LoadOptions& options) {
  if (is_gguf_file(dir)) {
    GgufModel model = load_gguf_model(dir);
    return ReferenceModel(std::move(model.config), std::move(model.tensors), dir.string(), options);
  }
  const std::filesystem::path config_file = dir / "config.json";
  ModelConfig config = load_config(config_file);
  auto checkpoint = std::make_shared<const Checkpoint>(Checkpoint::open(dir));
  return ReferenceModel(std::move(config), std::move(checkpoint), config_file.string(), options);
}

ReferenceModel::ReferenceModel(ModelConfig config, std::shared_ptr<const TensorSource> weights, std::string origin,
                               const LoadOptions& options)
    : origin_(origin),
      weights_(std::move(config), std::move(weights), std::move(origin), options.max_resident_bytes),
      inv_freq_(rope_inv_freq(weights_.config().head_dim, weights_.config().rope_theta,
                              weights_.config().rope_scaling)) {}

void ReferenceModel::check_tokens(std::span<const std::int32_t> tokens, std::int64_t pos0,
                                  const std::string& request) const {
  const ModelConfig& c = config();
  if (tokens.empty()) throw input_error(request, "tokens", "empty input: at least one token is needed");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      throw input_error(request, "tokens", "token id {} at index {} is outside the vocabulary [0, {}) of {}",
                        tokens[i], i, c.vocab_size, origin_);
    }
  }
  const std::int64_t end = pos0 + static_cast<std::int64_t>(tokens.size());
  if (end > c.max_position_embeddings) {
    throw input_error(request, "tokens", "{} tokens at position {} end at {}, past max_position_embeddings {} of {}",
                      tokens.size(), pos0, end, c.max_position_embeddings, origin_);
  }
}

MatrixRM ReferenceModel::forward(std::span<const std::int32_t> tokens, AttentionRecorder* recorder) const {
  KVCache scratch(config(), static_cast<std::int64_t>(tokens.size()));
  return run(tokens, scratch, recorder);
}

MatrixRM ReferenceModel::forward(std::span<const std::int32_t> tokens, KVCache& cache,
                                 AttentionRecorder* recorder) const {
  return run(tokens, cache, recorder);
}

namespace {

// x: [T, in]; w: [out, in]; b: [out] or empty.  Returns x w^T + b: [T, out].
MatrixRMd linear(const MatrixRMd& x, const MatrixRMd& w, const Eigen::RowVectorXd& b) {
  MatrixRMd y = x * w.transpose();
  if (b.size() > 0) y.rowwise() += b;
  return y;
}

void check_finite(const MatrixRMd& h, std::int64_t layer, std::int64_t pos0, const std::string& origin) {
  if (h.allFinite()) return;
  for (Eigen::Index t = 0; t < h.rows(); ++t) {
    if (!h.row(t).allFinite()) {
      throw input_error(origin, fmt::format("model.layers.{}", layer),
                        "non-finite activation (NaN or Inf) at position {} after this layer", pos0 + t);
    }
  }
}

}  // namespace

MatrixRM ReferenceModel::run(std::span<const std::int32_t> tokens, KVCache& cache, AttentionRecorder* recorder) const {
  const ModelConfig& c = config();
  const std::int64_t pos0 = cache.size_;
  const auto n_new = static_cast<std::int64_t>(tokens.size());
  check_tokens(tokens, pos0, "forward");
  if (pos0 + n_new > cache.capacity_) {
    throw std::length_error(fmt::format("KVCache: {} + {} tokens exceed capacity {}", pos0, n_new, cache.capacity_));
  }
  if (cache.k_.size() != static_cast<std::size_t>(c.num_hidden_layers) || cache.k_.front().cols() != c.kv_dim()) {
    throw std::invalid_argument("KVCache: built for a different model shape");
  }

  std::vector<std::int64_t> q_pos(static_cast<std::size_t>(n_new));
  for (std::int64_t t = 0; t < n_new; ++t) q_pos[t] = pos0 + t;
  std::vector<std::int64_t> k_pos(static_cast<std::size_t>(pos0 + n_new));
  for (std::int64_t t = 0; t < pos0 + n_new; ++t) k_pos[t] = t;
  const AttentionShape shape{c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.sliding_window};

  MatrixRMd h = weights_.embed(tokens);  // [T, H]
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::shared_ptr<const LayerWeights> w = weights_.layer(l);

    // Attention block.
    const MatrixRMd n1 = rmsnorm_ref(h, w->input_norm, c.rms_norm_eps);
    MatrixRMd q = linear(n1, w->wq, w->bq);  // [T, n_heads*d]
    MatrixRMd k = linear(n1, w->wk, w->bk);  // [T, n_kv*d]
    MatrixRMd v = linear(n1, w->wv, w->bv);  // [T, n_kv*d]
    if (c.qk_norm()) {
      q = head_rmsnorm_ref(q, c.num_attention_heads, c.head_dim, w->q_norm, c.rms_norm_eps);
      k = head_rmsnorm_ref(k, c.num_key_value_heads, c.head_dim, w->k_norm, c.rms_norm_eps);
    }
    rope_ref(q, c.num_attention_heads, c.head_dim, q_pos, inv_freq_);
    rope_ref(k, c.num_key_value_heads, c.head_dim, q_pos, inv_freq_);
    if (recorder) recorder->on_qkv(l, pos0, q, k, v);
    cache.k_[l].middleRows(pos0, n_new) = k;
    cache.v_[l].middleRows(pos0, n_new) = v;

    AttentionProbsFn on_probs;
    if (recorder && recorder->wants_probs(l)) {
      on_probs = [&](std::int64_t head, std::int64_t row, std::span<const double> probs) {
        recorder->on_probs(l, head, pos0 + row, probs);
      };
    }
    const MatrixRMd attn = attention_ref(q, cache.k_[l].topRows(pos0 + n_new), cache.v_[l].topRows(pos0 + n_new),
                                         q_pos, k_pos, shape, on_probs);
    h += linear(attn, w->wo, w->bo);

    // MLP block.
    const MatrixRMd n2 = rmsnorm_ref(h, w->post_norm, c.rms_norm_eps);
    const MatrixRMd act = swiglu_ref(n2 * w->w_gate.transpose(), n2 * w->w_up.transpose());
    h += act * w->w_down.transpose();
    check_finite(h, l, pos0, origin_);
  }
  cache.size_ = pos0 + n_new;

  const MatrixRMd final_hidden = rmsnorm_ref(h, weights_.final_norm(), c.rms_norm_eps);
  const MatrixRMd logits = final_hidden * weights_.lm_head()->transpose();  // [T, V]
  return logits.cast<float>();
}

}  // namespace kvcheck
