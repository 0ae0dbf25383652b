// What a head holds, derived independently of the engine from the exact key and value rows and
// the policy's declared tiers (the oracle side of the per-step check, oracles/step_oracle.h):
//
//   a token in tier t            its rows as tier t's formats store them (oracles/quantize_ref.h);
//   a demoted token              through the high tier's formats first (LeanKV re-quantizes what
//                                its high slot holds);
//   FP8                          with the head's scale: the amax of its prompt rows / 448 (later
//                                tokens saturate at ±448 · scale), or the head's fixed
//                                (calibrated) scale when given; fp8:scale=page: tier 1 in pages
//                                of fp8_page_tokens tokens (position order), each with the amax of
//                                its own fp16-rounded rows / 448;
//   a residual policy's tier 1   (KIVI, MiniKV) from the fp16-rounded rows; keys per channel over
//                                groups of G tokens formed by the tier's tokens in position order.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/kv_format.h"

namespace kvcheck {

struct HeldToken {
  std::int32_t position = 0;
  int tier = 0;
  bool demoted = false;
};

struct HeldRowsSpec {
  std::span<const KvTier> tiers;  // tier 0 high, tier 1 low
  bool residual = false;          // tier 1 is a residual policy's quantized cache
  std::int64_t prompt_len = 0;    // rows [0, prompt_len) set an FP8 head's scale
  std::int64_t head_dim = 0;
  float fp8_fixed_scale[2] = {0.0f, 0.0f};  // keys, values: when > 0, the head's calibrated FP8 scales
  std::int64_t fp8_page_tokens = 0;          // > 0: tier 1 is FP8 encoded a page of this many tokens at a time
};

// keys, values: exact [context][head_dim]; held: ascending positions. Fills held_keys and
// held_values ([held][head_dim]). std::runtime_error when the held set cannot be what the tiers
// store (a residual tier whose token count is not whole groups).
void held_rows_ref(const HeldRowsSpec& spec, std::span<const float> keys, std::span<const float> values,
                   std::span<const HeldToken> held, std::vector<float>& held_keys, std::vector<float>& held_values);

// The FP8 scales (keys, values) held_rows_ref applies: the fixed ones when given, else the amax of
// the prompt rows / 448. Every held row depends on the rows beyond its own only through these
// (and, for a residual tier, through its group's rows).
std::array<float, 2> held_rows_fp8_scales(const HeldRowsSpec& spec, std::span<const float> keys,
                                          std::span<const float> values);

// Rows [n][head_dim] stored in `format` as one block (per-channel: n a multiple of G), dequantized.
// FP8 uses fp8_scale.
std::vector<float> stored_rows_ref(const KvFormat& format, std::span<const float> rows, std::int64_t n,
                                   std::int64_t head_dim, float fp8_scale);

}  // namespace kvcheck
