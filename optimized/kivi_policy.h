// Residual policies: KIVI's 2-/4-bit cache and MiniKV (KIVI on a prompt selection).
//
// Both hold two tiers. Tier 1 (low) is the quantized cache: keys INT per channel over groups of G
// tokens (G consecutive slots of one page share each channel's fp16 scale and zero), values INT
// per token (KIVI) or per token in groups of g channels (MiniKV). Tier 0 (high) is the fp16
// residual, where every new token goes. A group's statistics are fixed once it is quantized, so
// tier 1 is append-only: nothing in it moves or is dropped.
//
//   prefill  the kept prompt tokens (KIVI: all of them), in position order: the first
//            floor(kept / G) * G are quantized (from their fp16 values), the rest stay in the
//            residual.
//   decode   before a token is appended, a head whose residual holds n_r tokens flushes it: all
//            n_r (a multiple of G) are quantized as n_r / G groups and appended to tier 1. The
//            residual therefore holds 1..n_r tokens when attention reads it, never more than n_r.
//            (MiniKV's Algorithm 1 appends first and flushes at n_r, so its residual holds
//            0..n_r - 1: the same tokens are quantized, one step later here, because the engine
//            writes the new token's key only inside the layer loop.)
//
//   kivi2, kivi4   every token kept; G = 32, n_r = 128 by default (docs/design.md §8).
//   minikv         MiniKV's persistent context selection at prefill: a recent window (a share of
//                  the budget) plus the heavy hitters, the older prompt tokens that received the
//                  most attention from all prompt queries (the prefill kernel's column sums, max
//                  over the GQA group), never revisited while decoding (every generated token is
//                  kept); 2 bits, G = 16 and g = 16 (MiniKV's groups of 16 elements), n_r = 128;
//                  per-layer budgets uniform or PyramidKV's (ratio > 1).
#pragma once

#include <cstdint>
#include <memory>

#include "optimized/kv_policy.h"

namespace kvcheck {

struct KiviParams {
  int bits = 2;
  std::int64_t group = 32;        // G: tokens per key channel group (16, 32 or 128)
  std::int64_t value_group = 0;   // g: channels per value group; 0 = the whole head per token
  std::int64_t residual = 128;    // n_r, a multiple of G
};

struct MiniKvParams {
  std::int64_t budget = 64;  // mean prompt tokens kept per head
  double recent = 0.5;       // share of a layer's budget for the most recent positions
  double pyramid = 1.0;      // 1: uniform budgets; > 1: PyramidKV's, last layer budget / pyramid
};

std::unique_ptr<KvPolicy> make_kivi_policy(const KiviParams& params);
std::unique_ptr<KvPolicy> make_minikv_policy(const KiviParams& quant, const MiniKvParams& selection);

// MiniKV's prompt selection of one head with a budget of `budget` tokens: the last
// round(budget * recent) positions (at least one) and the top remaining ones of [0, n - recent)
// by `scores`, ascending; every position when n <= budget.
std::vector<std::int32_t> minikv_select(std::span<const float> scores, std::int64_t n, std::int64_t budget,
                                        double recent);

// Registry entries (optimized/policy_registry.h).
PolicyEntry kivi_policy_entry(int bits);  // kivi2, kivi4
PolicyEntry minikv_policy_entry();

}  // namespace kvcheck
