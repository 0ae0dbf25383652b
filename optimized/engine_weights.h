// The engine's weights: the dense matrices as the checkpoint stores them (F32, F16 or BF16,
// borrowed from the mmapped safetensors bytes, never copied; a GGUF file's Q8_0 and Q4_1 blocks),
// widened to float inside the kernels (kernels/cpu/dense_ops.h); the small vectors (norms,
// biases) and the RoPE tables as float. Every widening is exact or, for the block formats, the
// very operations the reference's dequantization performs, so every projection gives the bits a
// float32 copy of the same weights would give, and a bf16 checkpoint costs its own bytes instead
// of twice them (a Q4_1 one 5/32 of its float32 copy's).
//
// The engine only runs Llama-family configs without a sliding window: a Mistral window needs a
// windowed page walk that the paged decode kernel does not do, so such a model is rejected here
// with an InputError naming the config instead of giving wrong answers.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/weight_dtype.h"
#include "reference/config.h"
#include "reference/model.h"
#include "reference/tensor.h"

namespace kvcheck {

using MatrixRMf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A [rows, cols] weight matrix in place: row-major, rows packed (row r starts at byte
// weight_row_bytes(dtype, r * cols)), little-endian elements (or blocks) of `dtype`. `data`
// points into bytes someone else keeps alive (EngineWeights::source) and may be unaligned.
struct WeightMatrix {
  const std::byte* data = nullptr;
  WeightDType dtype = WeightDType::kF32;
  std::int64_t rows = 0, cols = 0;

  const std::byte* row_bytes(std::int64_t r) const { return data + weight_row_bytes(dtype, r * cols); }
  // out[0, cols) = row r widened to float (exact).
  void widen_row_to(std::int64_t r, float* out) const { widen_row(row_bytes(r), dtype, cols, out); }
  // Rows [r0, r0 + n) widened into out [n, cols], row-major.
  void widen_rows_to(std::int64_t r0, std::int64_t n, float* out) const {
    widen_row(row_bytes(r0), dtype, n * cols, out);
  }
  std::int64_t bytes() const { return weight_row_bytes(dtype, rows * cols); }
};

// A projection y = W x (+ b): W is [out, in], row-major, so that every output element is one
// contiguous dot product.
struct DenseWeight {
  WeightMatrix w;
  std::vector<float> bias;  // [out], or empty
  std::int64_t out() const { return w.rows; }
  std::int64_t in() const { return w.cols; }
};

struct EngineLayer {
  std::vector<float> input_norm, post_norm;  // [H]
  std::vector<float> q_norm, k_norm;         // [head_dim] (Qwen3's per-head norms), or empty
  DenseWeight q, k, v, o;
  DenseWeight gate, up, down;
};

struct EngineWeights {
  ModelConfig config;
  // The checkpoint every WeightMatrix below points into (an mmapped file or tensors in memory).
  std::shared_ptr<const TensorSource> source;
  WeightMatrix embedding;         // [V, H]
  std::vector<EngineLayer> layers;
  std::vector<float> final_norm;  // [H]
  DenseWeight lm_head;            // [V, H] (the embedding's bytes when tied)
  std::vector<float> rope_cos, rope_sin;  // [max_position_embeddings][head_dim / 2]

  // Bytes of the weights the engine reads: each matrix as stored (a tied lm_head once) plus the
  // float biases.
  std::int64_t bytes() const;
};

// Views every layer of `model` in its checkpoint (InputError for configs the engine does not run,
// or a weight whose dtype is not F32, F16 or BF16). Never goes through the reference's double
// conversion.
EngineWeights load_engine_weights(const ReferenceModel& model);

}  // namespace kvcheck
