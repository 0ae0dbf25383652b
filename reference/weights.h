// The weights of a Llama-family checkpoint, by Hugging Face tensor name, converted to double
// one layer at a time (the reference computes in double; F32/F16/BF16 convert exactly).
//
// Tensors stay in the (mmapped) TensorSource; a layer's matrices are converted the
// first time the layer runs and kept while the total kept stays under max_resident_bytes, so a
// checkpoint larger than that still runs, converting each layer again when it is needed.
// Embedding rows are converted only for the tokens looked up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "reference/config.h"
#include "reference/matrix.h"
#include "reference/tensor.h"

namespace kvcheck {

// "model.layers.{layer}.{suffix}"
std::string layer_tensor_name(std::int64_t layer, const std::string& suffix);

struct ExpectedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
};

// Every tensor the reference reads for `config`, with the shape the config implies.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// Checks that every expected tensor exists with the expected shape and a float dtype
// (F32, F16 or BF16). InputError naming the tensor and the file it lives in otherwise.
void check_tensors(const ModelConfig& config, const TensorSource& source, const std::string& origin);

struct LayerWeights {
  std::vector<double> input_norm;  // [H]
  std::vector<double> post_norm;   // [H]
  std::vector<double> q_norm;      // [d], Qwen3's per-head norm of q; empty when the model has none
  std::vector<double> k_norm;      // [d], the same for k
  MatrixRMd wq;                    // [n_heads*d, H]
  MatrixRMd wk;                    // [n_kv*d, H]
  MatrixRMd wv;                    // [n_kv*d, H]
  MatrixRMd wo;                    // [H, n_heads*d]
  Eigen::RowVectorXd bq, bk, bv;   // [n_heads*d], [n_kv*d], [n_kv*d]; empty when the model has none
  Eigen::RowVectorXd bo;           // [H]; empty when the model has none
  MatrixRMd w_gate;                // [I, H]
  MatrixRMd w_up;                  // [I, H]
  MatrixRMd w_down;                // [H, I]

  std::size_t bytes() const;
};

class ModelWeights {
 public:
  // Validates every tensor (check_tensors) before anything runs.
  ModelWeights(ModelConfig config, std::shared_ptr<const TensorSource> source, std::string origin,
               std::size_t max_resident_bytes);

  const ModelConfig& config() const { return config_; }
  const TensorSource& source() const { return *source_; }
  // The same source, shared: the engine keeps it alive while it reads the weights in place.
  std::shared_ptr<const TensorSource> shared_source() const { return source_; }

  // The converted weights of one layer: kept from an earlier call, or converted now.
  std::shared_ptr<const LayerWeights> layer(std::int64_t layer) const;
  // out: [tokens.size(), H], row t = embedding row of tokens[t]. Ids must be in range.
  MatrixRMd embed(std::span<const std::int32_t> tokens) const;
  // lm_head.weight, or the embedding when tie_word_embeddings: [V, H].
  std::shared_ptr<const MatrixRMd> lm_head() const;
  std::span<const double> final_norm() const { return final_norm_; }

  // Bytes of converted weights currently kept.
  std::size_t resident_bytes() const;

 private:
  std::shared_ptr<LayerWeights> convert_layer(std::int64_t layer) const;
  MatrixRMd matrix(const std::string& name) const;
  std::vector<double> vector(const std::string& name) const;

  ModelConfig config_;
  std::shared_ptr<const TensorSource> source_;
  std::string origin_;
  std::size_t max_resident_bytes_;
  std::vector<double> final_norm_;

  mutable std::mutex mutex_;
  mutable std::vector<std::shared_ptr<const LayerWeights>> layers_;  // [num_hidden_layers]
  mutable std::shared_ptr<const MatrixRMd> lm_head_;
  mutable std::size_t resident_bytes_ = 0;
};

}  // namespace kvcheck
