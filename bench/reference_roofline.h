// A roofline for the reference's prefill (ReferenceModel::forward_from over T tokens, the logits
// of rows first_logit_row .. T - 1): the work it cannot avoid, and the time that predicts from two
// rates measured in the same run (bench/bench_baselines.h), on the threads the forward runs:
//   FLOPs  projections: 2 per weight per token (q, k, v, o, gate, up, down of every layer);
//          attention: 4 * head_dim per query head and visible (query, key) pair (q.k and p.v;
//          causal, T(T+1)/2 pairs, fewer under a sliding window); lm_head: 2 * hidden * vocab
//          per logit row computed;
//   bytes  every weight of the projections and the lm_head read once as double, each projection's
//          input read and output written once (double), q, k, v read and the attention output
//          written once per layer, and the float logits written;
//   roofline time = max(FLOPs / double GEMM rate, bytes / copy bandwidth).
// Element-wise work (norms, RoPE, SwiGLU, the softmax's exponentials) is not counted: the ratio
// roofline / measured says how close the forward runs to its GEMMs' ceiling.
#pragma once

#include <cstdint>

#include "reference/config.h"

namespace kvcheck {

struct ReferencePrefillWork {
  double projection_flops = 0.0;
  double attention_flops = 0.0;
  double lm_head_flops = 0.0;
  double bytes = 0.0;
  double flops() const { return projection_flops + attention_flops + lm_head_flops; }
};

// Query position i (0-based) sees min(i + 1, window) keys (window 0: i + 1).
ReferencePrefillWork reference_prefill_work(const ModelConfig& c, std::int64_t tokens, std::int64_t first_logit_row);

}  // namespace kvcheck
