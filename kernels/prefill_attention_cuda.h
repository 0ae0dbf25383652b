// Causal prefill attention with column sums, CUDA version (kernels/cpu/prefill_attention.h is the
// CPU twin and states the semantics; MiniKV's two-pass selective attention). C++17: nvcc compiles
// this header.
//   pass one  one warp per (query row, query head): keys in chunks of 32 (a lane per key for the
//             logits), online softmax over the chunks, the lanes owning the output channels; it
//             leaves the row's log-sum-exp.
//   pass two  (only when column or window sums are asked for) one thread per (key, query head)
//             sums p(i, j) = exp(s_ij - lse_i) over the queries i >= j in a fixed order: no
//             atomics, so the sums are deterministic; nothing tokens x tokens is ever stored.
// The verified baseline; tensor-core tiles for QKᵀ and PV replace these loops behind the same call.
#pragma once

#include <cstdint>

namespace kvcheck {

struct CudaPrefillArgs {
  std::int64_t tokens = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 0.0f;
  std::int64_t window = 0;          // the last `window` queries feed window_sums
  const float* q = nullptr;         // [tokens][n_heads * head_dim]
  const float* k = nullptr;         // [tokens][n_kv_heads * head_dim]
  const float* v = nullptr;
  float* out = nullptr;             // [tokens][n_heads * head_dim]
  float* column_sums = nullptr;     // null or [n_heads][tokens]
  float* window_sums = nullptr;     // null or [n_heads][tokens]
};

inline constexpr std::int64_t kCudaPrefillMaxHeadDim = 256;

// Host pointers: copies in, runs both passes, copies out. std::invalid_argument for a head_dim
// over the limit; std::runtime_error without a CUDA build or device. Shapes are the caller's to
// check (prefill_attention_cuda below does, through the CPU twin's checks).
void prefill_attention_cuda_host(const CudaPrefillArgs& args);
// Device pointers, on `stream` (a cudaStream_t; nullptr: default); lse: n_heads * tokens device
// floats of scratch. Asynchronous.
void prefill_attention_cuda_device(const CudaPrefillArgs& args, float* lse, void* stream);

}  // namespace kvcheck
