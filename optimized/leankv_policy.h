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
//
// Static mode (static_high = N >= 0, static_low = M >= 0): LeanKV's comparison of per-head
// dynamic sparsity with equal static per-head budgets. Every head holds the same number of
// tokens at each tier at every step, so every head has the same byte footprint:
//   prompt        the last W positions at high; the other positions ranked by the quantity the
//                 dynamic thresholds test, significance x i (i = j + 1, so the dynamic mode's
//                 high and low sets are always a prefix of this ranking), ties to the newer
//                 position; the first N at high, the next M at low, the rest dropped.
//   decode        when position p joins, the candidate c = p - W leaves the recent window at
//                 high. If the head then holds more than N high tokens outside the window, the
//                 least significant of them (c included; ties to the older) is the victim v:
//                 while the low tier holds fewer than M it moves to low; otherwise, with w the
//                 least significant low token, the less significant of v and w (ties to the
//                 older) is dropped, and if that is w, v moves to low. Significance is compared
//                 directly here, as the dynamic thresholds alpha / N are equal for every token.
// So after the step at position p a head holds min(W, p + 1) + min(N, O) high tokens and
// min(M, O - min(N, O)) low ones, O = max(0, p + 1 - W) the positions outside the window:
// counts that depend on the position only (leankv_static_counts). alpha_h and alpha_l are unused.
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include "optimized/kv_policy.h"

namespace kvcheck {

struct LeanKvParams {
  double alpha_h = 1.0, alpha_l = 0.02;
  std::int64_t window = 64;
  int high_k = 8, high_v = 4, low_k = 4, low_v = 2;  // bits; 16 means fp16
  // Static mode when both >= 0: tokens outside the recent window per head at high and at low.
  std::int64_t static_high = -1, static_low = -1;
  bool is_static() const { return static_high >= 0 && static_low >= 0; }
};

std::unique_ptr<KvPolicy> make_leankv_policy(const LeanKvParams& params);
// The parameters of a leankv policy, or nullopt for any other policy.
std::optional<LeanKvParams> leankv_params_of(const KvPolicy& policy);

// Static mode: the high and low token counts of every head once the context holds positions
// 0 .. last (prefill: last = prompt length - 1).
std::pair<std::int64_t, std::int64_t> leankv_static_counts(const LeanKvParams& params, std::int64_t last);

// The significance of a live token when `new_position` joins: score / (new_position - position).
double leankv_significance(const LiveToken& t, std::int32_t new_position);

// Registry entry (optimized/policy_registry.h).
PolicyEntry leankv_policy_entry();

}  // namespace kvcheck
