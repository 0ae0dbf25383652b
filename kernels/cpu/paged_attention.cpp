// Paged decode attention over unified pages, CPU twin. Two walks over the slots of one head:
//   1. keys:   logits of every live slot for every query head of the group (scratch [group][slots]),
//              each key row decoded straight into 8-float lanes and dotted with all the group's
//              queries (kernels/cpu/paged_attention_walks.inc)
//   2. values: weights w = exp(l - max) in place and Σ w per head, then out_g += w_g v̂ one unit
//              group of the value tiles at a time across a page's live slots, the output lanes of
//              four heads in registers (each value element decoded once for the whole group)
//   then normalise: out_g /= Σ w, probs = w / Σ w.
// Dead slots are skipped by their live bit before any byte of them is read: they hold NaN poison.
// The walks are compiled three times (baseline x86-64; AVX2 + F16C and AVX-512 chosen at run time)
// with the same operations lane for lane, and give the bits of the scalar decoders below, which the walks keep
// for rows that are not whole lanes (properties/kernels/paged_attention_isa_props.cpp).
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/lanes.h"
#include "kernels/cpu/page_codes.h"
#include "kernels/quant_math.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/page_offsets.h"
#include "reference/errors.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVCHECK_DECODE_HAS_AVX2 1
#include <immintrin.h>
#endif

// Lanes values only cross always-inline functions, so the AVX argument-passing ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kvcheck {
namespace {

using quant::f16_to_float;

constexpr const char* kWhere = "decode attention";
// One INT metadata pair: fp16 scale, then fp16 zero (kv_bytes.h's (scale, zero) pair); which pair
// a slot and channel read: kernels/page_offsets.h, as on the device.
constexpr std::int64_t kTokenMetaBytes = page_offsets::kMetaPairBytes;
using page_offsets::meta_pair_index;
constexpr int kTokenGroupMeta = page_offsets::kPerTokenGroupMeta;
constexpr int kChannelMeta = page_offsets::kPerChannelMeta;
constexpr std::int64_t kMaskBits = 64;

bool is_page_int_bits(int bits) { return bits == 8 || bits == 4 || bits == 2; }

// The formats a unified page holds and this kernel reads: fp32, fp16, FP8 E4M3 (one fp32 scale
// per page, the head's), and INT 8 / 4 / 2 with per-token metadata, per-token channel groups, or
// (keys only) per-channel metadata over groups of G slots (KIVI): slot s of a page is in group
// s / G, whose metadata is [head_dim] (scale, zero) pairs.
bool readable_in_pages(const KvFormat& f, bool key) {
  switch (f.dtype) {
    case KvDType::kFp32:
    case KvDType::kFp16:
    case KvDType::kFp8E4M3: return true;
    case KvDType::kInt:
      return is_page_int_bits(f.spec.bits) && (f.spec.granularity != Granularity::kPerChannel || key);
  }
  return false;
}

void check_page_format(const KvFormat& f, bool key, const std::string& where, const char* field) {
  if (!readable_in_pages(f, key)) {
    throw input_error(where, field, "{} is not a format the decode kernel reads from pages (fp32, fp16, fp8-e4m3, "
                      "int8 / int4 / int2 per token or per token group, per channel for keys)", kv_format_name(f));
  }
}

bool same_tiling(const CodeTiling& a, const CodeTiling& b) {
  return a.unit_bytes == b.unit_bytes && a.row_units == b.row_units && a.vec == b.vec && a.group == b.group;
}

std::int64_t row_bytes(const CodeTiling& t) { return t.row_units * t.unit_bytes; }
std::int64_t meta_segment_bytes(const KvFormat& f, std::int64_t head_dim, std::int64_t tokens) {
  const FormatBytes b = format_bytes(f, head_dim);
  return b.meta_bytes(tokens) + b.meta_bytes_per_page;
}

// A TierRead made for another head_dim (or by hand, inconsistently) would read the wrong bytes
// silently: its tilings and segment sizes must be the ones this head_dim gives.
void check_tier(const TierRead& t, std::size_t index, std::int64_t head_dim) {
  const bool formats_ok = readable_in_pages(t.tier.key, true) && readable_in_pages(t.tier.value, false);
  const bool tilings_ok = formats_ok && same_tiling(t.key_tiling, key_code_tiling(t.tier.key, head_dim)) &&
                          same_tiling(t.value_tiling, value_code_tiling(t.tier.value, head_dim));
  const PageLayout& l = t.layout;
  const bool layout_ok = tilings_ok && l.tokens > 0 && l.tokens % t.value_tiling.vec == 0 &&
                         l.tokens % t.tier.key.spec.token_group() == 0 &&
                         l.key_codes.bytes == l.tokens * row_bytes(t.key_tiling) &&
                         l.value_codes.bytes == l.tokens * row_bytes(t.value_tiling) &&
                         l.key_meta.bytes == meta_segment_bytes(t.tier.key, head_dim, l.tokens) + l.key_range.bytes &&
                         l.key_range.bytes == (t.tier.key_range ? key_range_bytes(head_dim) : 0) &&
                         l.value_meta.bytes == meta_segment_bytes(t.tier.value, head_dim, l.tokens);
  if (layout_ok) return;  // every head of every step: no message formatted
  const std::string where = fmt::format("{}: tiers[{}] ({})", kWhere, index, kv_tier_name(t.tier));
  check_page_format(t.tier.key, true, where, "key format");
  check_page_format(t.tier.value, false, where, "value format");
  if (!tilings_ok) {
    throw input_error(where, "tilings", "are not the key / value code tilings of head_dim {}", head_dim);
  }
  throw input_error(where, "layout", "is not a page layout of this tier at head_dim {} ({} tokens)", head_dim,
                    l.tokens);
}

std::int64_t page_tokens(const DecodeHeadInput& in, std::size_t page) {
  const int tier = in.pages[page].tier;
  if (tier < 0 || static_cast<std::size_t>(tier) >= in.tiers.size()) {
    throw input_error(kWhere, fmt::format("pages[{}].tier", page), "{} is not one of the {} tiers", tier,
                      in.tiers.size());
  }
  return in.tiers[static_cast<std::size_t>(tier)].layout.tokens;
}


std::int64_t live_slots(std::span<const std::uint64_t> live, std::int64_t tokens) {
  std::int64_t n = 0;
  for (std::int64_t w = 0; w * kMaskBits < tokens; ++w) {
    std::uint64_t bits = live[static_cast<std::size_t>(w)];
    const std::int64_t left = tokens - w * kMaskBits;
    if (left < kMaskBits) bits &= (std::uint64_t{1} << left) - 1U;
    n += std::popcount(bits);
  }
  return n;
}

// Validates every size and index the walks rely on; returns decode_slots(in).
std::int64_t validate(const DecodeHeadInput& in, const DecodeHeadOutput& out) {
  const std::int64_t d = in.head_dim;
  if (d <= 0) throw input_error(kWhere, "head_dim", "must be positive, got {}", d);
  if (in.group < 1) throw input_error(kWhere, "group", "must be at least 1, got {}", in.group);
  if (!(in.scale > 0.0f) || !std::isfinite(in.scale)) {
    throw input_error(kWhere, "scale", "must be positive and finite, got {}", in.scale);
  }
  if (in.q.size() != static_cast<std::size_t>(in.group * d)) {
    throw input_error(kWhere, "q", "{} floats for group {} x head_dim {}", in.q.size(), in.group, d);
  }
  if (in.residual_tokens < 0) throw input_error(kWhere, "residual_tokens", "must be >= 0, got {}", in.residual_tokens);
  const auto residual_values = static_cast<std::size_t>(in.residual_tokens * d);
  if (in.residual_keys.size() != residual_values) {
    throw input_error(kWhere, "residual_keys", "{} fp16 values for {} tokens x head_dim {}", in.residual_keys.size(),
                      in.residual_tokens, d);
  }
  if (in.residual_values.size() != residual_values) {
    throw input_error(kWhere, "residual_values", "{} fp16 values for {} tokens x head_dim {}",
                      in.residual_values.size(), in.residual_tokens, d);
  }
  for (std::size_t t = 0; t < in.tiers.size(); ++t) check_tier(in.tiers[t], t, d);
  std::int64_t live = in.residual_tokens;
  for (std::size_t p = 0; p < in.pages.size(); ++p) {
    const std::int64_t tokens = page_tokens(in, p);
    const PageRead& page = in.pages[p];
    if (page.bytes == nullptr) throw input_error(kWhere, fmt::format("pages[{}].bytes", p), "is null");
    if (static_cast<std::int64_t>(page.live.size()) * kMaskBits < tokens) {
      throw input_error(kWhere, fmt::format("pages[{}].live", p), "{} words cannot mark {} slots", page.live.size(),
                        tokens);
    }
    live += live_slots(page.live, tokens);
  }
  if (live == 0) {
    throw input_error(kWhere, "no live token", "{} page(s) with every slot dead and no residual token",
                      in.pages.size());
  }
  if (out.out.size() != static_cast<std::size_t>(in.group * d)) {
    throw input_error(kWhere, "out", "{} floats for group {} x head_dim {}", out.out.size(), in.group, d);
  }
  const std::int64_t slots = decode_slots(in);
  if (!out.probs.empty() && out.probs.size() != static_cast<std::size_t>(in.group * slots)) {
    throw input_error(kWhere, "probs", "{} floats for group {} x {} slots (or empty)", out.probs.size(), in.group,
                      slots);
  }
  return slots;
}

// ---------------------------------------------------------------------------------------------
// Decoding one slot's rows straight out of the tiled code segments (kv_bytes.h, CodeTiling): no
// copy of the row first. A storage unit is one fp32 / fp16 element, or one byte of 8 / b INT
// codes.

using row_ops::f16_to_float_select;

void decode_f16_row(const std::uint16_t* row, std::int64_t d, float* x) { row_ops::f16_row_to_float(row, d, x); }

// `units` storage units, unit i at src + i * stride bytes, into floats: the fp32 / fp16 values,
// or for INT the codes themselves (0 .. 2^b - 1, exact in float), little end first
// (kernels/cpu/bitpack.h). kStride 0: the stride is the runtime `stride`; else it is kStride.
template <KvDType kType, int kBits, std::int64_t kStride>
void decode_units(const std::uint8_t* src, std::int64_t units, std::int64_t stride, float* x) {
  const std::int64_t step = kStride != 0 ? kStride : stride;
  for (std::int64_t i = 0; i < units; ++i) {
    const std::uint8_t* unit = src + i * step;
    if constexpr (kType == KvDType::kFp32) {
      std::memcpy(x + i, unit, sizeof(float));
    } else if constexpr (kType == KvDType::kFp16) {
      std::uint16_t h;
      std::memcpy(&h, unit, sizeof h);  // a plain load once compiled; no aliasing question
      x[i] = f16_to_float_select(h);
    } else if constexpr (kType == KvDType::kFp8E4M3) {
      x[i] = quant::e4m3_to_float(*unit);  // the code's value; the page scale is applied after
    } else {
      constexpr int kPerByte = 8 / kBits;
      constexpr unsigned kMask = (1U << kBits) - 1U;
      const unsigned byte = *unit;
      for (int k = 0; k < kPerByte; ++k) x[i * kPerByte + k] = static_cast<float>((byte >> (k * kBits)) & kMask);
    }
  }
}

// One dispatch per row instead of per unit. kContiguous: units back to back (key chunks).
template <bool kContiguous>
void decode_units(const KvFormat& f, const std::uint8_t* src, std::int64_t units, std::int64_t stride, float* x) {
  switch (f.dtype) {
    case KvDType::kFp32: decode_units<KvDType::kFp32, 0, kContiguous ? 4 : 0>(src, units, stride, x); return;
    case KvDType::kFp16: decode_units<KvDType::kFp16, 0, kContiguous ? 2 : 0>(src, units, stride, x); return;
    case KvDType::kInt:
      switch (f.spec.bits) {
        case 8: decode_units<KvDType::kInt, 8, kContiguous ? 1 : 0>(src, units, stride, x); return;
        case 4: decode_units<KvDType::kInt, 4, kContiguous ? 1 : 0>(src, units, stride, x); return;
        default: decode_units<KvDType::kInt, 2, kContiguous ? 1 : 0>(src, units, stride, x); return;
      }
    case KvDType::kFp8E4M3: decode_units<KvDType::kFp8E4M3, 0, kContiguous ? 1 : 0>(src, units, stride, x); return;
  }
}

std::int64_t elements_per_unit(const KvFormat& f) {
  return f.dtype == KvDType::kInt ? f.spec.codes_per_byte() : 1;
}

// Keys [row_units / (vec*group)][tokens][group][vec]: a row is chunks of vec*group contiguous
// units, chunk c + 1 of a slot `tokens` chunks after its chunk c.
void decode_key_row(const KvFormat& f, const CodeTiling& t, const std::uint8_t* segment, std::int64_t tokens,
                    std::int64_t slot, float* x) {
  const std::int64_t chunk_units = t.vec * t.group, chunk_bytes = chunk_units * t.unit_bytes;
  const std::int64_t per_unit = elements_per_unit(f);
  const std::uint8_t* src = segment + key_code_offset(t, tokens, slot, 0);
  for (std::int64_t u = 0; u < t.row_units; u += chunk_units, src += tokens * chunk_bytes) {
    decode_units<true>(f, src, chunk_units, t.unit_bytes, x + u * per_unit);
  }
}

// Values [row_units / group][tokens / vec][group][vec]: within a group of units, consecutive
// units of one slot are vec units apart (the vec slots of a token vector sit between them); the
// next group of units starts tokens * group units further on.
void decode_value_row(const KvFormat& f, const CodeTiling& t, const std::uint8_t* segment, std::int64_t tokens,
                      std::int64_t slot, float* x) {
  const std::int64_t per_unit = elements_per_unit(f);
  const std::uint8_t* src = segment + value_code_offset(t, tokens, slot, 0);
  for (std::int64_t u = 0; u < t.row_units; u += t.group, src += tokens * t.group * t.unit_bytes) {
    decode_units<false>(f, src, t.group, t.vec * t.unit_bytes, x + u * per_unit);
  }
}

struct TokenMeta {
  float scale = 1.0f;
  float zero = 0.0f;
};

TokenMeta read_meta(const std::uint8_t* page, const PageSegment& segment, std::int64_t pair_index) {
  std::uint16_t pair[2];
  std::memcpy(pair, page + segment.offset + pair_index * kTokenMetaBytes, sizeof pair);
  return {f16_to_float(pair[0]), f16_to_float(pair[1])};
}

// Per-token INT keys take the fused dot (s Σ q_c code_c + z Σ q_c); every other stored format is
// turned into its values first (in place, over the decoded codes) and dotted plainly.
bool fused_key(const KvFormat& f) { return f.dtype == KvDType::kInt && f.spec.granularity == Granularity::kPerToken; }

// x holds the decoded codes of `slot` (decode_units: INT codes, or E4M3 values); makes them the
// stored values: fl(code * s + z) with the metadata of the slot's token, its channel group, or its
// token group's channel (kernels/cpu/quantize.h's dequantize); the E4M3 value times the page's
// fp32 scale (dequantize_fp8_e4m3). fp32 / fp16 rows are already values.
void dequantize_row(const KvFormat& f, const std::uint8_t* page, const PageSegment& meta, std::int64_t slot,
                    std::int64_t d, float* x) {
  if (f.dtype == KvDType::kFp8E4M3) {
    float scale = 0.0f;
    std::memcpy(&scale, page + meta.offset, sizeof scale);
    for (std::int64_t c = 0; c < d; ++c) x[c] = quant::mul_rn(x[c], scale);
    return;
  }
  if (f.dtype != KvDType::kInt) return;
  const QuantSpec& spec = f.spec;
  switch (spec.granularity) {
    case Granularity::kPerToken: {
      const TokenMeta m = read_meta(page, meta, slot);
      for (std::int64_t c = 0; c < d; ++c) x[c] = quant::dequantize_value(static_cast<std::uint32_t>(x[c]), m.scale, m.zero);
      return;
    }
    case Granularity::kPerTokenGroup: {
      for (std::int64_t c = 0; c < d; ++c) {
        const TokenMeta m = read_meta(page, meta, meta_pair_index(kTokenGroupMeta, spec.group, slot, c, d));
        x[c] = quant::dequantize_value(static_cast<std::uint32_t>(x[c]), m.scale, m.zero);
      }
      return;
    }
    case Granularity::kPerChannel: {
      for (std::int64_t c = 0; c < d; ++c) {
        const TokenMeta m = read_meta(page, meta, meta_pair_index(kChannelMeta, spec.group, slot, c, d));
        x[c] = quant::dequantize_value(static_cast<std::uint32_t>(x[c]), m.scale, m.zero);
      }
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The walks' scratch and the three ISA builds of them.

// Rows the value walk decodes before adding them in, where it cannot walk unit groups.
constexpr std::int64_t kBatch = 4;

// Per-call scratch, one per thread, reused: no allocation per slot, none per call once grown.
struct Scratch {
  std::vector<float> logits;         // [group][slots]: logits, then weights exp(l - max); 0 at dead slots
  std::vector<float> x;              // [head_dim]: a row decoded by the scalar decoders
  std::vector<float> rows;           // [kBatch][head_dim]: the value rows of a batch of slots
  std::vector<float> batch_weights;  // [group][kBatch]: their weights
  std::vector<float> qk;             // [group]: one key row's dot with each query head
  std::vector<float> qk2, qk3;       // [group]: the same for the AVX-512 key walk's slot pairs
  std::vector<float> q_sums;         // [group]: Σ_c q_gc, the zero's coefficient in the fused INT dot
  std::vector<float> q_pairs;        // [group / 2][head_dim / 8][16]: heads 2p, 2p + 1 lane group by lane
                                     // group, side by side (the AVX-512 key dots; head_dim % 8 == 0)
  std::vector<float> maxima;         // [group]
  std::vector<float> sums;           // [group]: Σ weights
  std::vector<float> meta_scales;    // [head_dim]: the slot's group scales, or a KIVI unit's channel scales
  std::vector<float> meta_zeros;     // [head_dim]: the same for the zeros
  std::int64_t meta_unit = -1;       // the KIVI unit (slot / G) whose channel metadata is loaded
  std::vector<std::int32_t> live;    // [tokens of the largest page]: a page's live slots, in order
  std::vector<std::int32_t> live_tile, live_lane;  // their value tiles' byte offsets in a column, lanes
  std::int64_t live_count = 0;
  std::vector<float> live_scales;    // [live][head_dim / group or 1]: their value metadata
  std::vector<float> live_zeros;
  const std::uint8_t* ahead = nullptr;  // the next page's segments the walk will read, to prefetch
  std::int64_t ahead_bytes = 0;
};


// q_pairs: fill Scratch::q_pairs (only the AVX-512 walks read it).
Scratch& make_scratch(const DecodeHeadInput& in, std::int64_t slots, bool q_pairs) {
  thread_local Scratch s;
  const auto g = static_cast<std::size_t>(in.group);
  const auto d = static_cast<std::size_t>(in.head_dim);
  s.logits.assign(g * static_cast<std::size_t>(slots), 0.0f);
  s.x.assign(d, 0.0f);
  s.rows.assign(static_cast<std::size_t>(kBatch) * d, 0.0f);
  s.batch_weights.assign(g * static_cast<std::size_t>(kBatch), 0.0f);
  s.qk.assign(g, 0.0f);
  s.qk2.assign(g, 0.0f);
  s.qk3.assign(g, 0.0f);
  s.q_sums.assign(g, 0.0f);
  s.maxima.assign(g, -std::numeric_limits<float>::infinity());
  s.sums.assign(g, 0.0f);
  s.meta_scales.assign(d, 0.0f);
  s.meta_zeros.assign(d, 0.0f);
  s.meta_unit = -1;
  std::size_t tokens = 0;
  for (const TierRead& t : in.tiers) tokens = std::max(tokens, static_cast<std::size_t>(t.layout.tokens));
  s.live.resize(tokens);
  s.live_tile.resize(tokens);
  s.live_lane.resize(tokens);
  s.live_scales.resize(tokens * d);
  s.live_zeros.resize(tokens * d);
  for (std::size_t k = 0; k < g; ++k) {
    for (std::size_t c = 0; c < d; ++c) s.q_sums[k] += in.q[k * d + c];
  }
  const bool pairs = q_pairs && d % 8 == 0;
  s.q_pairs.resize(pairs ? g / 2 * 2 * d : 0);
  for (std::size_t p = 0; pairs && p < g / 2; ++p) {
    for (std::size_t c = 0; c < d; ++c) {
      const std::size_t at = p * 2 * d + (c / 8) * 16 + c % 8;
      s.q_pairs[at] = in.q[2 * p * d + c];
      s.q_pairs[at + 8] = in.q[(2 * p + 1) * d + c];
    }
  }
  return s;
}

// How the vector walks dequantize a row: nothing (fp32, fp16, and per-token INT keys, whose
// metadata enters the fused dot), the page's FP8 scale, or INT metadata per token, per token
// group of channels, or per channel of a KIVI unit of slots.
enum class Meta { kNone, kPageScale, kToken, kTokenGroup, kChannel };
struct RowMeta {
  float scale = 1.0f, zero = 0.0f;  // kPageScale (scale), kToken
  const float* scales = nullptr;    // kTokenGroup: [head_dim / group] of the slot; kChannel: [head_dim]
  const float* zeros = nullptr;
  std::int64_t group = 1;           // kTokenGroup: channels per group
};

using lanes::I32Lanes;
using lanes::I32Lanes16;
using lanes::Lanes;
using lanes::Lanes16;
using lanes::Lanes4;
using lanes::U16Lanes;
using lanes::U32Lanes;
using lanes::U32Lanes16;
using lanes::U8Lanes;

// The walks three times, portable, AVX2 + F16C and AVX-512: their templates must be compiled under
// the target they run on (an always-inline F16C intrinsic cannot be inlined into a function
// without F16C). Off x86-64 only the portable build exists.
namespace portable {
#include "kernels/cpu/paged_attention_walks.inc"
}  // namespace portable

#if defined(KVCHECK_DECODE_HAS_AVX2)
#include "kernels/cpu/avx2_target_begin.inc"
namespace avx2 {
#define KVCHECK_DECODE_AVX2 1
#include "kernels/cpu/paged_attention_walks.inc"
#undef KVCHECK_DECODE_AVX2
}  // namespace avx2
#include "kernels/cpu/avx2_target_end.inc"

#include "kernels/cpu/avx512_target_begin.inc"
namespace avx512 {
#define KVCHECK_DECODE_AVX2 1
#define KVCHECK_DECODE_AVX512 1
#include "kernels/cpu/paged_attention_walks.inc"
#undef KVCHECK_DECODE_AVX512
#undef KVCHECK_DECODE_AVX2
}  // namespace avx512
#include "kernels/cpu/avx512_target_end.inc"
#endif

}  // namespace

TierRead make_tier_read(const KvTier& tier, std::int64_t head_dim, std::int64_t page_bytes) {
  const std::string where = fmt::format("{}: tier {}", kWhere, kv_tier_name(tier));
  check_page_format(tier.key, true, where, "key format");
  check_page_format(tier.value, false, where, "value format");
  TierRead t;
  t.tier = tier;
  t.layout = page_layout(tier, head_dim, page_bytes);
  t.key_tiling = key_code_tiling(tier.key, head_dim);
  t.value_tiling = value_code_tiling(tier.value, head_dim);
  return t;
}

std::int64_t decode_slots(const DecodeHeadInput& in) {
  std::int64_t slots = in.residual_tokens;
  for (std::size_t p = 0; p < in.pages.size(); ++p) slots += page_tokens(in, p);
  return slots;
}

std::int64_t check_decode_head(const DecodeHeadInput& in, const DecodeHeadOutput& out) { return validate(in, out); }

LinearIsa paged_decode_isa() { return linear_rows_isa(); }

void paged_decode_attention(const DecodeHeadInput& in, const DecodeHeadOutput& out, LinearIsa isa) {
  const std::int64_t slots = validate(in, out);
  if (!linear_isa_available(isa)) {
    throw std::invalid_argument(std::string("paged_decode_attention: ISA ") + linear_isa_name(isa) +
                                " is not available on this CPU");
  }
  Scratch& s = make_scratch(in, slots, isa == LinearIsa::kAvx512);
  std::fill(out.out.begin(), out.out.end(), 0.0f);
#if defined(KVCHECK_DECODE_HAS_AVX2)
  if (isa == LinearIsa::kAvx512) avx512::walks(in, s, slots, out.out.data());
  else if (isa == LinearIsa::kAvx2) avx2::walks(in, s, slots, out.out.data());
  else portable::walks(in, s, slots, out.out.data());
#else
  portable::walks(in, s, slots, out.out.data());
#endif
  const std::int64_t d = in.head_dim;
  for (std::int64_t g = 0; g < in.group; ++g) {
    const float sum = s.sums[static_cast<std::size_t>(g)];  // >= 1: the maximum's own weight is 1
    for (std::int64_t c = 0; c < d; ++c) out.out[static_cast<std::size_t>(g * d + c)] /= sum;
    if (out.probs.empty()) continue;
    for (std::int64_t j = 0; j < slots; ++j) {
      const auto at = static_cast<std::size_t>(g * slots + j);
      out.probs[at] = s.logits[at] / sum;
    }
  }
}

void paged_decode_attention(const DecodeHeadInput& in, const DecodeHeadOutput& out) {
  paged_decode_attention(in, out, paged_decode_isa());
}

}  // namespace kvcheck
