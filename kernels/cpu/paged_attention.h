// Paged decode attention over unified pages, CPU twin (docs/design.md §5 and §7; LeanKV
// section 5): one request, one kv head, the GQA group of query heads that share it. The kernel
// reads the bytes optimized/page_pool.h writes, through the same offsets (kernels/cpu/page_codes.h),
// so pages are interchangeable between the engine's backends.
//
// A page of tier t holds tiers[t].layout.tokens slots in the six segments of kv_bytes.h:
//   key codes    tiled rows (key_code_offset): fp32 / fp16 elements, E4M3 codes, or packed INT codes
//   key meta     fp16 (scale, zero) pairs, host byte order: [tokens][1] per-token INT,
//                [tokens][head_dim / g] per token group of g channels, [tokens / G][head_dim] per
//                channel over groups of G slots (KIVI keys: slot s is in group s / G); for FP8 one
//                fp32 scale (the head's, copied into each of its pages)
//   value codes  tiled rows (value_code_offset)
//   value meta   as the key meta (no per-channel values)
//   scores, positions: not read here
// Dead slots (live bit clear) hold 0xFF poison (NaN as fp16 / fp32 and as INT metadata): the
// kernel skips them without reading a byte of them, so a poisoned dead slot can never leak a NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu/dense_ops.h"  // LinearIsa
#include "kernels/cpu/kv_bytes.h"

namespace kvcheck {

// What the kernel needs to read one tier's pages: its formats, segment layout and code tilings.
struct TierRead {
  KvTier tier;
  PageLayout layout;                 // page_layout(tier, head_dim, page_bytes)
  CodeTiling key_tiling, value_tiling;  // key_code_tiling / value_code_tiling at head_dim
};
// InputError when a format is not one a page holds (fp32, fp16, fp8-e4m3, INT 8/4/2 per token or
// per token group; per channel for keys) or the tier fits no token in page_bytes.
TierRead make_tier_read(const KvTier& tier, std::int64_t head_dim, std::int64_t page_bytes);

struct PageRead {
  const std::byte* bytes = nullptr;                 // the page's page_bytes bytes
  std::span<const std::uint64_t> live;              // live-slot bitset (bit s%64 of word s/64)
  int tier = 0;                                     // index into DecodeHeadInput::tiers
};

struct DecodeHeadInput {
  std::int64_t head_dim = 0;
  std::int64_t group = 1;                           // query heads sharing this kv head (GQA)
  float scale = 0.0f;                               // usually 1/sqrt(head_dim)
  std::span<const TierRead> tiers;
  std::span<const PageRead> pages;                  // walk order: high-precision pages, then low
  std::int64_t residual_tokens = 0;                 // fp16 tokens after the pages (KIVI residual)
  std::span<const std::uint16_t> residual_keys;     // [residual_tokens][head_dim] fp16 bits
  std::span<const std::uint16_t> residual_values;   // [residual_tokens][head_dim] fp16 bits
  std::span<const float> q;                         // [group][head_dim], post-RoPE
};

// slots = sum over pages of tiers[page.tier].layout.tokens, plus residual_tokens.
// (InputError when a page names a tier that does not exist.)
std::int64_t decode_slots(const DecodeHeadInput& in);

struct DecodeHeadOutput {
  std::span<float> out;                             // [group][head_dim]
  std::span<float> probs = {};                      // empty, or [group][decode_slots(in)] in walk
                                                    // order (page i's slots, then residual); 0 for dead slots
};

// For each query head g: logits l_j = scale * q_g · k̂_j over every live slot and residual token
// (per-token INT keys as the fused s·Σ q_c code_c + z·Σ q_c, never materialising k̂; other formats
// dequantized first), softmax with the maximum subtracted, out_g = Σ_j p_j v̂_j (v̂_j = fl(code·s + z)
// for INT values, exactly kernels/cpu/quantize.h's dequantize; fl(e4m3(code)·scale) for FP8). Float accumulation; the oracle is
// oracles/retained_attention.h (double, over the dequantized live tokens).
// InputError (naming the field) for bad sizes, an unsupported format, or no live token at all.
//
// Vectorized (kernels/cpu/paged_attention_walks.inc): each key row is decoded straight into
// 8-float lanes (F16C for fp16, E4M3 by shifting its bits into a float and one exact product,
// shifts and masks for packed INT codes)
// and dotted with every query head of the group; the value walk accumulates a batch of slots per
// output lane. Every element still takes the operations written above, and every sum its order
// (row_ops::dot's eight lane sums for the logits, slots in walk order for Σ w and out), without
// FMA (kernels/ builds with -ffp-contract=off): the three builds, portable (baseline x86-64),
// AVX2 + F16C and AVX-512 (F, VL, BW, DQ), give the same bits as each other, and the portable one
// the bits of a scalar restatement (properties/kernels/paged_attention_isa_props.cpp), so results
// do not depend on the CPU.
void paged_decode_attention(const DecodeHeadInput& in, const DecodeHeadOutput& out);
// The same with a chosen ISA (tests compare the three); std::invalid_argument if unavailable.
void paged_decode_attention(const DecodeHeadInput& in, const DecodeHeadOutput& out, LinearIsa isa);
// The ISA paged_decode_attention uses on this CPU: the widest it has (AVX-512, else AVX2 + F16C,
// else portable), capped by KVCHECK_ISA=portable|avx2|avx512 (kernels/cpu/dense_ops.h's
// linear_rows_isa).
LinearIsa paged_decode_isa();

// The checks paged_decode_attention makes before reading a byte (the CUDA batch builder,
// kernels/paged_attention_cuda_adapter.h, makes them too); returns decode_slots(in).
std::int64_t check_decode_head(const DecodeHeadInput& in, const DecodeHeadOutput& out);

}  // namespace kvcheck
