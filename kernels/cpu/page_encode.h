// A block of one head's key or value rows encoded as unified pages store them (docs/design.md
// §4 and §5; kernels/cpu/paged_attention.h for the page side): the code row of each token,
// the metadata each slot carries, and the metadata of each per-channel group. Shared by the
// engine's KV cache, which writes pages, and the tests, which build them by hand.
//
//   fp32 / fp16    the elements (fp16 rounded to nearest even); no metadata
//   INT per token  slot metadata: its fp16 (scale, zero)
//   INT per token group of g channels
//                  slot metadata: [head_dim / g] fp16 (scale, zero) pairs
//   INT per channel over G tokens (keys)
//                  no slot metadata; group u (rows u*G .. u*G+G-1): [head_dim] (scale, zero) pairs
//   FP8 E4M3       slot metadata: the head's fp32 scale (each page holds one copy)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/kv_bytes.h"

namespace kvcheck {

struct EncodedBlock {
  std::int64_t rows = 0, row_bytes = 0, slot_meta_bytes = 0, group_tokens = 1, group_meta_bytes = 0;
  std::vector<std::uint8_t> codes;       // [rows][row_bytes]
  std::vector<std::uint8_t> slot_meta;   // [rows][slot_meta_bytes]
  std::vector<std::uint8_t> group_meta;  // [rows / group_tokens][group_meta_bytes] (per-channel keys)
  float fp8_scale = 0.0f;

  std::span<const std::uint8_t> row(std::int64_t i) const {
    return std::span(codes).subspan(static_cast<std::size_t>(i * row_bytes), static_cast<std::size_t>(row_bytes));
  }
  std::span<const std::uint8_t> meta(std::int64_t i) const {
    return std::span(slot_meta).subspan(static_cast<std::size_t>(i * slot_meta_bytes),
                                        static_cast<std::size_t>(slot_meta_bytes));
  }
  std::span<const std::uint8_t> group(std::int64_t u) const {
    return std::span(group_meta).subspan(static_cast<std::size_t>(u * group_meta_bytes),
                                         static_cast<std::size_t>(group_meta_bytes));
  }
};

// x: [rows][head_dim]. rows must be a multiple of the format's token group (G for per-channel
// keys). FP8 uses `fp8_scale` when it is > 0 (values beyond 448 * scale saturate), else the
// block's own amax / 448. InputError (naming `at`) for non-finite input or a bad spec.
EncodedBlock encode_block(const KvFormat& format, std::span<const float> x, std::int64_t rows, std::int64_t head_dim,
                          const KvLocation& at, float fp8_scale = 0.0f);

// The values the block stores, [rows][head_dim]: what the decode kernel reads back.
std::vector<float> decode_block(const KvFormat& format, const EncodedBlock& block, std::int64_t head_dim);

}  // namespace kvcheck
