// The reference Llama-family transformer: exact and plain, in double. Threaded only where every
// output element is still computed by one thread in a fixed order (projection tiles, attention
// work items, rows of the element-wise layers), so its bits do not depend on the thread count.
//
// Per layer:  h += o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))),  n = rmsnorm(h)
//             h += down_proj(silu(gate_proj(n)) * up_proj(n)),                      n = rmsnorm(h)
// then logits = lm_head(rmsnorm(h)). Qwen3 normalizes every q and k head (q_norm, k_norm)
// between the projection and RoPE. Everything is computed in double, every product a
// reference/dot_rows.h sum in an order fixed by its length alone (so the same bits on any machine),
// from weights converted exactly from F32/F16/BF16; logits are rounded to float once at the end.
// Double makes the two decode paths below agree to ~1e-16 (they differ where attention's sums run
// over different key runs) and keeps the reference far more exact than any float32 engine held
// against it.
//
// Two decode paths that must agree: forward(tokens) recomputes every position from scratch;
// forward(tokens, cache) appends to a contiguous KV cache and computes only the new positions.
// forward_from(..., first_logit_row) computes the lm_head of the last rows only: at long context
// the full [T, vocab] logits (1.6 GB of float at 8K tokens for a 49K vocabulary) and their
// products are most of the memory and a tenth of the work.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reference/attention.h"
#include "reference/config.h"
#include "reference/matrix.h"
#include "reference/tensor.h"
#include "reference/weights.h"

namespace kvcheck {

// Hooks that see the inside of the forward pass. Oracles and policies use them.
class AttentionRecorder {
 public:
  virtual ~AttentionRecorder() = default;
  // Post-RoPE q, k and v of the tokens just processed, at positions pos0, pos0 + 1, ...
  // q: [T, n_heads * head_dim]; k, v: [T, n_kv_heads * head_dim].
  virtual void on_qkv(std::int64_t /*layer*/, std::int64_t /*pos0*/, const MatrixRMd& /*q*/, const MatrixRMd& /*k*/,
                      const MatrixRMd& /*v*/) {}
  // Whether on_probs should be called for `layer` (probabilities cost O(T * context) per head).
  virtual bool wants_probs(std::int64_t /*layer*/) const { return false; }
  // Attention probabilities of query head `head` at position `query_pos` over the keys at
  // positions 0 .. probs.size() - 1 (0 for masked keys).
  virtual void on_probs(std::int64_t /*layer*/, std::int64_t /*head*/, std::int64_t /*query_pos*/,
                        std::span<const double> /*probs*/) {}
};

// A plain contiguous KV cache: per layer, K and V rows for positions 0 .. size() - 1.
class KVCache {
 public:
  KVCache(const ModelConfig& config, std::int64_t capacity);

  std::int64_t size() const { return size_; }
  std::int64_t capacity() const { return capacity_; }
  // Rows [0, size()) of layer `layer`: [size(), n_kv_heads * head_dim], post-RoPE keys.
  // (Rows from size() to capacity() are scratch.)
  const MatrixRMd& keys(std::int64_t layer) const { return k_[layer]; }
  const MatrixRMd& values(std::int64_t layer) const { return v_[layer]; }

 private:
  friend class ReferenceModel;
  std::int64_t capacity_;
  std::int64_t size_ = 0;
  std::vector<MatrixRMd> k_;  // [layers] x [capacity, kv_dim]
  std::vector<MatrixRMd> v_;
};

struct LoadOptions {
  // Converted (double) weights kept in memory; layers beyond it are converted again on each use.
  std::size_t max_resident_bytes = std::size_t{16} << 30;
  // Threads of a forward (<= 0: every core). The logits do not depend on it, bit for bit.
  int threads = 0;
};

// Where a forward's time went (forward_from's optional profile), in seconds.
struct ForwardProfile {
  double projections_s = 0;  // q/k/v/o and the MLP's gate/up/down products
  double attention_s = 0;    // attention_ref
  double lm_head_s = 0;      // final norm and lm_head over the rows asked for
  double other_s = 0;        // embedding, norms, RoPE, SwiGLU, residual adds, cache copies
};

class ReferenceModel {
 public:
  // Reads DIR/config.json and DIR/model.safetensors (or the sharded index), or a GGUF file
  // (reference/gguf_model.h), and validates every tensor against the config. InputError naming
  // the file and field/tensor on any problem.
  static ReferenceModel load(const std::filesystem::path& dir, const LoadOptions& options = {});

  ReferenceModel(ModelConfig config, std::shared_ptr<const TensorSource> weights, std::string origin,
                 const LoadOptions& options = {});

  const ModelConfig& config() const { return weights_.config(); }
  const ModelWeights& weights() const { return weights_; }
  const std::string& origin() const { return origin_; }

  // Full recompute: logits [T, vocab] for positions 0 .. T - 1.
  MatrixRM forward(std::span<const std::int32_t> tokens, AttentionRecorder* recorder = nullptr) const;
  // Incremental: tokens sit at positions cache.size() ...; they are appended to the cache and
  // their logits [T, vocab] returned.
  MatrixRM forward(std::span<const std::int32_t> tokens, KVCache& cache, AttentionRecorder* recorder = nullptr) const;
  // As the two above, but the logits of rows first_logit_row .. T - 1 of `tokens` only:
  // [T - first_logit_row, vocab], 0 <= first_logit_row < T (std::invalid_argument otherwise).
  // Row r is bit-identical to row first_logit_row + r of the forward above: each logit is one
  // dot_rows sum (reference/dot_rows.h), whatever rows are asked for. The lm_head's work goes out
  // in tiles of kLogitRowTile rows.
  MatrixRM forward_from(std::span<const std::int32_t> tokens, std::int64_t first_logit_row,
                        AttentionRecorder* recorder = nullptr, ForwardProfile* profile = nullptr) const;
  MatrixRM forward_from(std::span<const std::int32_t> tokens, KVCache& cache, std::int64_t first_logit_row,
                        AttentionRecorder* recorder = nullptr, ForwardProfile* profile = nullptr) const;
  static constexpr std::int64_t kLogitRowTile = 64;

  int threads() const { return threads_; }
  void set_threads(int threads) { threads_ = threads; }

  // InputError unless tokens is non-empty, every id is in [0, vocab) and pos0 + T fits in
  // max_position_embeddings. `request` names the input in the message.
  void check_tokens(std::span<const std::int32_t> tokens, std::int64_t pos0, const std::string& request) const;

 private:
  MatrixRM run(std::span<const std::int32_t> tokens, KVCache& cache, std::int64_t first_logit_row,
               AttentionRecorder* recorder, ForwardProfile* profile) const;

  std::string origin_;
  ModelWeights weights_;
  std::vector<double> inv_freq_;  // [head_dim / 2]
  int threads_ = 0;
};

}  // namespace kvcheck
