#include "bench/reference_roofline.h"

#include <algorithm>

namespace kvcheck {

ReferencePrefillWork reference_prefill_work(const ModelConfig& c, std::int64_t tokens, std::int64_t first_logit_row) {
  const double t = static_cast<double>(tokens);
  const double hidden = static_cast<double>(c.hidden_size);
  const double q_dim = static_cast<double>(c.num_attention_heads * c.head_dim);
  const double kv_dim = static_cast<double>(c.num_key_value_heads * c.head_dim);
  const double inter = static_cast<double>(c.intermediate_size);
  const double layers = static_cast<double>(c.num_hidden_layers);
  const double vocab = static_cast<double>(c.vocab_size);
  const double logit_rows = static_cast<double>(tokens - first_logit_row);

  // Weights per layer: q and o (hidden x q_dim), k and v (hidden x kv_dim), gate, up, down.
  const double layer_weights = 2.0 * hidden * q_dim + 2.0 * hidden * kv_dim + 3.0 * hidden * inter;
  double pairs = 0.0;  // visible (query, key) pairs of one head
  for (std::int64_t i = 0; i < tokens; ++i) {
    pairs += static_cast<double>(c.sliding_window > 0 ? std::min<std::int64_t>(i + 1, c.sliding_window) : i + 1);
  }

  ReferencePrefillWork w;
  w.projection_flops = 2.0 * layer_weights * t * layers;
  w.attention_flops = 4.0 * static_cast<double>(c.head_dim) * pairs * static_cast<double>(c.num_attention_heads) * layers;
  w.lm_head_flops = 2.0 * hidden * vocab * logit_rows;
  // Activations per layer: the inputs and outputs of the seven projections, then q, k, v in and
  // the attention output out.
  const double layer_acts = t * ((hidden + q_dim) + 2.0 * (hidden + kv_dim) + (q_dim + hidden) +
                                 2.0 * (hidden + inter) + (inter + hidden) + (q_dim + 2.0 * kv_dim + q_dim));
  w.bytes = 8.0 * (layer_weights * layers + hidden * vocab + layer_acts * layers + logit_rows * hidden) +
            4.0 * logit_rows * vocab;
  return w;
}

}  // namespace kvcheck
