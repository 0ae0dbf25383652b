// The engine's copy of a model's weights: float32, row-major, one struct per layer, converted
// once from the reference's ModelWeights (F32, F16 and BF16 checkpoints convert to float exactly,
// through the reference's exact double conversion).
//
// The engine only runs Llama-family configs without a sliding window: a Mistral window needs a
// windowed page walk that the paged decode kernel does not do, so such a model is rejected here
// with an InputError naming the config instead of giving wrong answers.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <vector>

#include "reference/config.h"
#include "reference/model.h"

namespace kvcheck {

using MatrixRMf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A projection y = W x (+ b): W is [out, in], row-major, so that every output element is one
// contiguous dot product.
struct DenseWeight {
  MatrixRMf w;
  std::vector<float> bias;  // [out], or empty
  std::int64_t out() const { return w.rows(); }
  std::int64_t in() const { return w.cols(); }
};

struct EngineLayer {
  std::vector<float> input_norm, post_norm;  // [H]
  std::vector<float> q_norm, k_norm;         // [head_dim] (Qwen3's per-head norms), or empty
  DenseWeight q, k, v, o;
  DenseWeight gate, up, down;
};

struct EngineWeights {
  ModelConfig config;
  MatrixRMf embedding;            // [V, H]
  std::vector<EngineLayer> layers;
  std::vector<float> final_norm;  // [H]
  DenseWeight lm_head;            // [V, H] (a copy of the embedding when tied)
  std::vector<float> rope_cos, rope_sin;  // [max_position_embeddings][head_dim / 2]

  std::int64_t bytes() const;
};

// Converts every layer of `model` (InputError for configs the engine does not run).
EngineWeights load_engine_weights(const ReferenceModel& model);

}  // namespace kvcheck
