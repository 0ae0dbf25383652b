// Random paged decode-attention cases for the kernel properties (CPU twin) and the GPU parity
// tests: real pages in a poisoned pool (optimized/page_pool.h) over random heads, GQA groups,
// tier mixes, awkward page sizes, live masks and fp16 residual tokens; the oracle's view of the
// same tokens; and the float tolerance of a kernel against the double oracle. Call inside a
// RapidCheck property (draws use rc::gen).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "optimized/page_pool.h"
#include "oracles/retained_attention.h"
#include "properties/support/float_eps.h"

namespace kvcheck::testing {

// A drawn case: real pages in a poisoned pool, the kernel's input over them, and the oracle's
// view (the live tokens, dequantized, in walk order).
struct DecodeCase {
  std::int64_t head_dim = 0, group = 1;
  float scale = 0.0f;
  PagePool pool;
  std::vector<PageId> walk;  // page ids in walk order
  std::vector<TierRead> tier_reads;
  std::vector<PageRead> page_reads;
  std::int64_t residual_tokens = 0;
  std::vector<std::uint16_t> residual_keys, residual_values;
  std::vector<float> q;
  std::int64_t slots = 0;
  // Oracle side.
  std::vector<float> keys_hat, values_hat;     // [live][head_dim]
  std::vector<float> key_zero;                 // [live]: |ẑ| of INT keys, else 0
  std::vector<std::int64_t> live_walk_index;   // [live]: the walk-order slot of each live token
  std::string summary;

  explicit DecodeCase(PagePoolConfig c) : pool(std::move(c)) {}

  DecodeHeadInput input() const;
  std::int64_t live() const { return static_cast<std::int64_t>(live_walk_index.size()); }
};

// The tiers the cases draw from, most bytes per token first.
std::vector<KvTier> decode_tier_catalogue();
// Draws a case (rc::gen); max_head_dim and max_group bound the shapes. head_dims, when given,
// replaces the default head sizes (8 .. 256, powers of two), and the tiers are then drawn from
// those of the catalogue that store that head size (a per-token-group format needs a multiple of
// its group, INT2 a multiple of 4).
DecodeCase draw_decode_case(std::int64_t max_head_dim = 128, std::int64_t max_group = 8,
                            std::span<const std::int64_t> head_dims = {});

// Float tolerance of a kernel against the double oracle, per query head g (derivation in
// decode_cases.cpp): |p̂ - p| <= prob_rel p + kProbUnderflow, |out̂ - out| <= out.
struct DecodeTolerance {
  double prob_rel = 0.0;
  double out = 0.0;
};
DecodeTolerance decode_tolerance(const DecodeCase& c, std::int64_t g);

RetainedAttentionRef decode_oracle(const DecodeCase& c);

}  // namespace kvcheck::testing
