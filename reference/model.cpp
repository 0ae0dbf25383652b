#include "reference/model.h"

#include <chrono>

#include <fmt/format.h>

#include "reference/dot_rows.h"
#include "reference/errors.h"
#include "reference/gguf.h"
#include "reference/gguf_model.h"
#include "reference/layers.h"
#include "reference/parallel.h"
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
                              weights_.config().rope_scaling)),
      threads_(options.threads) {}

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
  return forward_from(tokens, 0, recorder);
}

MatrixRM ReferenceModel::forward(std::span<const std::int32_t> tokens, KVCache& cache,
                                 AttentionRecorder* recorder) const {
  return run(tokens, cache, 0, recorder, nullptr);
}

MatrixRM ReferenceModel::forward_from(std::span<const std::int32_t> tokens, std::int64_t first_logit_row,
                                      AttentionRecorder* recorder, ForwardProfile* profile) const {
  KVCache scratch(config(), static_cast<std::int64_t>(tokens.size()));
  return run(tokens, scratch, first_logit_row, recorder, profile);
}

MatrixRM ReferenceModel::forward_from(std::span<const std::int32_t> tokens, KVCache& cache,
                                      std::int64_t first_logit_row, AttentionRecorder* recorder,
                                      ForwardProfile* profile) const {
  return run(tokens, cache, first_logit_row, recorder, profile);
}

namespace {

// Projection tiles shared among the threads: rows x output features. Every element is one
// dot_rows sum whatever tile it falls in, so the tiles only share the work out.
constexpr Eigen::Index kLinearRowTile = 256;
constexpr Eigen::Index kLinearColTile = 128;

// x: [T, in]; w: [out, in]; b: [out] or empty.  Returns x w^T + b: [T, out], each element
// dot_rows(x[t], w[o]) + b[o], one dot_rows call per tile of kLinearRowTile rows by
// kLinearColTile features.
MatrixRMd linear(const MatrixRMd& x, const MatrixRMd& w, const Eigen::RowVectorXd& b, int threads) {
  MatrixRMd y(x.rows(), w.rows());
  const Eigen::Index row_tiles = (x.rows() + kLinearRowTile - 1) / kLinearRowTile;
  const Eigen::Index col_tiles = (w.rows() + kLinearColTile - 1) / kLinearColTile;
  parallel_items(row_tiles * col_tiles, threads, [&](std::int64_t item, int) {
    const Eigen::Index r0 = (item / col_tiles) * kLinearRowTile;
    const Eigen::Index c0 = (item % col_tiles) * kLinearColTile;
    const Eigen::Index nr = std::min(kLinearRowTile, x.rows() - r0);
    const Eigen::Index nc = std::min(kLinearColTile, w.rows() - c0);
    auto tile = y.block(r0, c0, nr, nc);
    dot_rows(x.middleRows(r0, nr), w.middleRows(c0, nc), tile);
    if (b.size() > 0) tile.rowwise() += b.segment(c0, nc);
  });
  return y;
}

// Logits of the rows of x (final hidden states): [rows, vocab] float, in
// tiles of kLogitRowTile rows by kLinearColTile vocabulary entries, each tile rounded to float
// from a per-thread scratch: no [T, vocab] double is ever held.
MatrixRM lm_head_rows(const MatrixRMd& x, const MatrixRMd& w, int threads) {
  constexpr Eigen::Index kRows = ReferenceModel::kLogitRowTile;
  MatrixRM logits(x.rows(), w.rows());
  const Eigen::Index row_tiles = (x.rows() + kRows - 1) / kRows;
  const Eigen::Index col_tiles = (w.rows() + kLinearColTile - 1) / kLinearColTile;
  const std::int64_t items = row_tiles * col_tiles;
  std::vector<MatrixRMd> scratch(static_cast<std::size_t>(parallel_workers(items, threads)),
                                 MatrixRMd(kRows, kLinearColTile));
  parallel_items(items, threads, [&](std::int64_t item, int worker) {
    const Eigen::Index r0 = (item / col_tiles) * kRows;
    const Eigen::Index c0 = (item % col_tiles) * kLinearColTile;
    const Eigen::Index nr = std::min(kRows, x.rows() - r0);
    const Eigen::Index nc = std::min(kLinearColTile, w.rows() - c0);
    auto tile = scratch[static_cast<std::size_t>(worker)].topLeftCorner(nr, nc);
    dot_rows(x.middleRows(r0, nr), w.middleRows(c0, nc), tile);
    logits.block(r0, c0, nr, nc) = tile.cast<float>();
  });
  return logits;
}

double seconds_since(std::chrono::steady_clock::time_point& start) {
  const auto now = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(now - start).count();
  start = now;
  return s;
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

MatrixRM ReferenceModel::run(std::span<const std::int32_t> tokens, KVCache& cache, std::int64_t first_logit_row,
                             AttentionRecorder* recorder, ForwardProfile* profile) const {
  const ModelConfig& c = config();
  const std::int64_t pos0 = cache.size_;
  const auto n_new = static_cast<std::int64_t>(tokens.size());
  check_tokens(tokens, pos0, "forward");
  if (first_logit_row < 0 || first_logit_row >= n_new) {
    throw std::invalid_argument(
        fmt::format("forward_from: first_logit_row {} is outside the {} tokens", first_logit_row, n_new));
  }
  const int threads = threads_;
  ForwardProfile unused;
  ForwardProfile& prof = profile != nullptr ? *profile : unused;
  auto clock = std::chrono::steady_clock::now();
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
    prof.other_s += seconds_since(clock);
    const MatrixRMd n1 = rmsnorm_ref(h, w->input_norm, c.rms_norm_eps, threads);
    prof.other_s += seconds_since(clock);
    MatrixRMd q = linear(n1, w->wq, w->bq, threads);  // [T, n_heads*d]
    MatrixRMd k = linear(n1, w->wk, w->bk, threads);  // [T, n_kv*d]
    MatrixRMd v = linear(n1, w->wv, w->bv, threads);  // [T, n_kv*d]
    prof.projections_s += seconds_since(clock);
    if (c.qk_norm()) {
      q = head_rmsnorm_ref(q, c.num_attention_heads, c.head_dim, w->q_norm, c.rms_norm_eps, threads);
      k = head_rmsnorm_ref(k, c.num_key_value_heads, c.head_dim, w->k_norm, c.rms_norm_eps, threads);
    }
    rope_ref(q, c.num_attention_heads, c.head_dim, q_pos, inv_freq_, threads);
    rope_ref(k, c.num_key_value_heads, c.head_dim, q_pos, inv_freq_, threads);
    if (recorder) recorder->on_qkv(l, pos0, q, k, v);
    cache.k_[l].middleRows(pos0, n_new) = k;
    cache.v_[l].middleRows(pos0, n_new) = v;

    AttentionProbsFn on_probs;
    if (recorder && recorder->wants_probs(l)) {
      on_probs = [&](std::int64_t head, std::int64_t row, std::span<const double> probs) {
        recorder->on_probs(l, head, pos0 + row, probs);
      };
    }
    prof.other_s += seconds_since(clock);
    const MatrixRMd attn = attention_ref(q, cache.k_[l].topRows(pos0 + n_new), cache.v_[l].topRows(pos0 + n_new),
                                         q_pos, k_pos, shape, on_probs, threads);
    prof.attention_s += seconds_since(clock);
    const MatrixRMd o = linear(attn, w->wo, w->bo, threads);
    prof.projections_s += seconds_since(clock);
    h += o;

    // MLP block.
    const MatrixRMd n2 = rmsnorm_ref(h, w->post_norm, c.rms_norm_eps, threads);
    prof.other_s += seconds_since(clock);
    const Eigen::RowVectorXd no_bias;
    const MatrixRMd gate = linear(n2, w->w_gate, no_bias, threads);
    const MatrixRMd up = linear(n2, w->w_up, no_bias, threads);
    prof.projections_s += seconds_since(clock);
    const MatrixRMd act = swiglu_ref(gate, up, threads);
    prof.other_s += seconds_since(clock);
    const MatrixRMd down = linear(act, w->w_down, no_bias, threads);
    prof.projections_s += seconds_since(clock);
    h += down;
    check_finite(h, l, pos0, origin_);
  }
  cache.size_ = pos0 + n_new;
  prof.other_s += seconds_since(clock);

  // The final norm and the logits of the rows asked for.
  const MatrixRMd tail = h.bottomRows(n_new - first_logit_row);
  const MatrixRMd final_hidden = rmsnorm_ref(tail, weights_.final_norm(), c.rms_norm_eps, threads);
  MatrixRM logits = lm_head_rows(final_hidden, *weights_.lm_head(), threads);
  prof.lm_head_s += seconds_since(clock);
  return logits;
}

}  // namespace kvcheck
