// Random causal prefill-attention cases (properties/support/prefill_cases.h).
#include "properties/support/prefill_cases.h"

#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "properties/support/quant_cases.h"

namespace kvcheck::testing {

PrefillCase draw_prefill_case(const std::vector<std::int64_t>& head_dims) {
  PrefillCase c;
  PrefillAttentionInput& in = c.in;
  in.tokens = *rc::gen::inRange<std::int64_t>(1, 301);
  in.n_kv_heads = *rc::gen::element<std::int64_t>(1, 2);
  in.n_heads = in.n_kv_heads * *rc::gen::element<std::int64_t>(1, 2, 4);
  in.head_dim = *rc::gen::elementOf(head_dims);
  in.tile = *rc::gen::element<std::int64_t>(1, 3, 16, 64);
  const std::int64_t window = *rc::gen::element<std::int64_t>(0, 1, 7, 32, -1);
  in.window = window < 0 ? in.tokens + 5 : window;
  in.threads = *rc::gen::inRange(1, 4);
  // Key magnitude sets how peaked the softmax is: flat (0.5), typical (1), sharp (4).
  const float key_scale = *rc::gen::element(0.5f, 1.0f, 4.0f);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  in.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in.head_dim)));  // attention_ref's scale
  c.q = make_values(ValueDist::kNormal, in.tokens, in.n_heads * in.head_dim, seed);
  c.k = make_values(ValueDist::kNormal, in.tokens, in.n_kv_heads * in.head_dim, seed + 1);
  c.v = make_values(ValueDist::kNormal, in.tokens, in.n_kv_heads * in.head_dim, seed + 2);
  for (float& x : c.k) x *= key_scale;
  in.q = c.q;
  in.k = c.k;
  in.v = c.v;
  std::ostringstream s;
  s << "tokens " << in.tokens << ", heads " << in.n_heads << " / kv " << in.n_kv_heads << ", head_dim "
    << in.head_dim << ", tile " << in.tile << ", window " << in.window << ", threads " << in.threads
    << ", key scale " << key_scale;
  c.summary = s.str();
  RC_LOG() << c.summary << "\n";
  RC_CLASSIFY(in.tokens % in.tile != 0, "partial last tile");
  RC_CLASSIFY(in.window >= in.tokens, "window covers every query");
  return c;
}

// Relative float tolerance of one head, shared by its outputs and its column sums.
//
// Logits: a float dot of d products, |ŝ - s| <= δ = 2 (d + 4) u · scale · Σ|q_c| max|k_c| plus
// 4 u |s| for the scaling and the exponent's subtraction (M below bounds |s|). The online softmax
// rescales the accumulator once per key tile: (tokens / tile + 1) corrections of a few u each,
// and sums up to tokens weights: (3 tokens + 8) u. The row's lse carries the same errors into
// pass two's p = exp(s - lse). Probabilities (so outputs and column sums, sums of probabilities)
// are then within a factor e^{±(2δ + that)}; twice it for the slack of the inequalities.
double prefill_head_tolerance(const PrefillCase& c, std::int64_t h) {
  const PrefillAttentionInput& in = c.in;
  const std::int64_t d = in.head_dim, kv = h / (in.n_heads / in.n_kv_heads);
  double max_k = 0.0, max_q_sum = 0.0;
  for (std::int64_t j = 0; j < in.tokens; ++j) {
    double q_sum = 0.0;
    for (std::int64_t ch = 0; ch < d; ++ch) {
      max_k = std::max(max_k, static_cast<double>(std::fabs(c.k[static_cast<std::size_t>((j * in.n_kv_heads + kv) * d + ch)])));
      q_sum += std::fabs(c.q[static_cast<std::size_t>((j * in.n_heads + h) * d + ch)]);
    }
    max_q_sum = std::max(max_q_sum, q_sum);
  }
  const double logit_bound = in.scale * max_q_sum * max_k;  // M
  const double delta = 2.0 * static_cast<double>(d + 4) * kFloatEps * logit_bound + 4.0 * kFloatEps * logit_bound;
  const auto tokens = static_cast<double>(in.tokens);
  const double rescales = tokens / static_cast<double>(in.tile) + 1.0;
  const double sums = (3.0 * tokens + 8.0) * kFloatEps + rescales * (4.0 + 2.0 * logit_bound) * kFloatEps;
  return 2.0 * std::expm1(2.0 * delta + 2.0 * sums);
}

}  // namespace kvcheck::testing
