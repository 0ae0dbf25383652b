// The numeric operations the model runner needs, behind one interface so that the CPU backend
// (optimized/cpu_backend.h: the kernels/cpu twins on a thread pool) and the CUDA backend
// (optimized/cuda_backend.h: the kernels/*_cuda.h versions) plug into the same runner. Each
// backend checks the span sizes and forwards to its kernels (kernels/cpu/dense_ops.h and
// kernels/dense_ops_cuda.h, the attention twins). Buffers are host float spans, row-major.
//
// Batch invariance is part of the contract: `linear` computes every row with the same
// instructions whatever the row count and whatever the other rows hold, so a request's tokens do
// not depend on which requests share its decode step. `linear_prefill` (one request's prompt)
// may use a blocked GEMM whose rounding depends on the row count (the CUDA backend's cuBLAS; the
// CPU backend runs `linear`); the runner only calls it on a request's whole prompt, which is the
// same in every run.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/prefill_attention.h"
#include "optimized/engine_weights.h"

namespace kvcheck {

class ResidentBackend;  // optimized/resident_backend.h

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int threads() const = 0;
  // The device-resident interface of this backend (docs/design.md §15), or null: the runner's
  // decode step then runs on it, and these span operations serve the rest (prefill).
  virtual ResidentBackend* resident() { return nullptr; }

  // y[r] = W x[r] (+ bias) for `rows` rows; batch-invariant (see above).
  virtual void linear(const DenseWeight& w, std::span<const float> x, std::int64_t rows, std::span<float> y) = 0;
  // The same result shape as linear, for the rows of one prompt, as one GEMM.
  virtual void linear_prefill(const DenseWeight& w, std::span<const float> x, std::int64_t rows,
                              std::span<float> y) = 0;
  // out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, per row. Qwen3's q_norm / k_norm use it
  // with one row per (token, head) and width head_dim.
  virtual void rmsnorm(std::span<const float> x, std::int64_t rows, std::span<const float> weight, double eps,
                       std::span<float> out) = 0;
  // Rotates every head of every row in place (rotate-half pairing) at positions[r], with the
  // cos/sin tables of EngineWeights.
  virtual void rope(std::span<float> x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                    std::span<const std::int32_t> positions, std::span<const float> cos_table,
                    std::span<const float> sin_table) = 0;
  // gate[i] = silu(gate[i]) * up[i], in place.
  virtual void swiglu(std::span<float> gate, std::span<const float> up) = 0;
  // Causal attention over one prompt, with optional column sums (kernels/cpu/prefill_attention.h).
  virtual void prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) = 0;
  // Decode attention for a batch of (request, kv-head) pairs over their pages
  // (kernels/cpu/paged_attention.h); the pairs are independent.
  virtual void decode_attention(std::span<const DecodeHeadInput> in, std::span<const DecodeHeadOutput> out) = 0;
};

}  // namespace kvcheck
