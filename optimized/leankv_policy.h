// LeanKV's compression policy (LeanKV section 4 and Algorithm 1): keys and values at different
// precisions, three token tiers by attention significance, and a per-head footprint that follows
// each head's own sparsity (no budget).
//
//   tiers         high (K8V4 by default) and low (K4V2), per-token INT with fp16 scale and zero;
//                 any bit widths of 2, 4, 8 or 16 (fp16) for each of the four.
//   significance  of a token: the attention it has received, divided by the number of queries
//                 that could see it (itself included: the prefill kernel's column sums include the
//                 diagonal), the maximum over the query heads of its kv head's group.
//   prompt        the last W positions at high; position j (1-based index i = j + 1) at high when
//                 its significance is at least alpha_h / i, at low when at least alpha_l / i,
//                 otherwise dropped.
//   decode        Algorithm 1, per head, when position p joins at high with the context at
//                 N = p + 1 tokens: the candidate c = p - W leaves the recent window. If
//                 sig(c) >= alpha_h / N, c stays high, and the least significant high token
//                 outside the window is the victim: kept when >= alpha_h / N, moved to low when
//                 >= alpha_l / N, else dropped. Else if sig(c) >= alpha_l / N, c moves to low and
//                 the least significant low token is dropped when below alpha_l / N. Else c is
//                 dropped. Ties go to the older position. At most one move and one drop per step.
#pragma once

#include <memory>

#include "optimized/kv_policy.h"

namespace kvcheck {

struct LeanKvParams {
  double alpha_h = 1.0, alpha_l = 0.02;
  std::int64_t window = 64;
  int high_k = 8, high_v = 4, low_k = 4, low_v = 2;  // bits; 16 means fp16
};

std::unique_ptr<KvPolicy> make_leankv_policy(const LeanKvParams& params);

// The significance of a live token when `new_position` joins: score / (new_position - position).
double leankv_significance(const LiveToken& t, std::int32_t new_position);

}  // namespace kvcheck
