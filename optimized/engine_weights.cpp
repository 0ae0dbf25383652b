#include "optimized/engine_weights.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "reference/errors.h"
#include "reference/layers.h"

namespace kvcheck {
namespace {

DenseWeight dense(const MatrixRMd& w, const Eigen::RowVectorXd& bias) {
  DenseWeight d;
  d.w = w.cast<float>();
  d.bias.resize(static_cast<std::size_t>(bias.size()));
  for (Eigen::Index i = 0; i < bias.size(); ++i) d.bias[static_cast<std::size_t>(i)] = static_cast<float>(bias[i]);
  return d;
}

std::vector<float> to_float(std::span<const double> v) { return {v.begin(), v.end()}; }

std::int64_t dense_bytes(const DenseWeight& d) {
  return static_cast<std::int64_t>(d.w.size() + static_cast<Eigen::Index>(d.bias.size())) * 4;
}

}  // namespace

std::int64_t EngineWeights::bytes() const {
  std::int64_t n = static_cast<std::int64_t>(embedding.size()) * 4 + dense_bytes(lm_head);
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
  const ModelWeights& w = model.weights();
  // In chunks, so that a large vocabulary never needs its whole table in double at once.
  e.embedding.resize(c.vocab_size, c.hidden_size);
  constexpr std::int64_t kChunk = 4096;
  for (std::int64_t t0 = 0; t0 < c.vocab_size; t0 += kChunk) {
    const std::int64_t n = std::min(kChunk, c.vocab_size - t0);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(t0 + i);
    e.embedding.middleRows(t0, n) = w.embed(ids).cast<float>();
  }
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto lw = w.layer(l);
    EngineLayer el;
    el.input_norm = to_float(lw->input_norm);
    el.post_norm = to_float(lw->post_norm);
    el.q_norm = to_float(lw->q_norm);
    el.k_norm = to_float(lw->k_norm);
    el.q = dense(lw->wq, lw->bq);
    el.k = dense(lw->wk, lw->bk);
    el.v = dense(lw->wv, lw->bv);
    el.o = dense(lw->wo, lw->bo);
    const Eigen::RowVectorXd none;
    el.gate = dense(lw->w_gate, none);
    el.up = dense(lw->w_up, none);
    el.down = dense(lw->w_down, none);
    e.layers.push_back(std::move(el));
  }
  e.final_norm = to_float(w.final_norm());
  e.lm_head = dense(*w.lm_head(), Eigen::RowVectorXd());
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
