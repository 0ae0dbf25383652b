// Bytes accounting of KV formats and tiers (the types are kernels/kv_format.h), and the segment
// layout of a unified page (docs/design.md §4 and §5): memory is compared in bytes, metadata
// included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kernels/kv_format.h"

namespace kvcheck {

// Bytes of one format for one head.
struct FormatBytes {
  std::int64_t code_bytes_per_token = 0;  // the values themselves: head_dim * bits / 8
  std::int64_t meta_bytes_per_unit = 0;   // fp16 scale + zero pairs of one unit of tokens
  std::int64_t tokens_per_unit = 1;       // G for per-channel groups, else 1
  std::int64_t meta_bytes_per_page = 0;   // FP8: its fp32 per-head scale, one copy per page

  // Amortised bytes per token per head, metadata included (the per-page copy excluded).
  double bytes_per_token() const {
    return static_cast<double>(code_bytes_per_token) +
           static_cast<double>(meta_bytes_per_unit) / static_cast<double>(tokens_per_unit);
  }
  // Code plus metadata bytes of n tokens (n a multiple of tokens_per_unit), per-page copy excluded.
  std::int64_t meta_bytes(std::int64_t n) const { return n / tokens_per_unit * meta_bytes_per_unit; }
};

// Validates the format for the head size (InputError, as validate(QuantSpec, head_dim)).
FormatBytes format_bytes(const KvFormat& format, std::int64_t head_dim);


// Key plus value bytes per token per head, metadata included (scores and positions excluded).
double tier_bytes_per_token(const KvTier& tier, std::int64_t head_dim);

// Bytes of the KV cache of a whole model, every token stored in `tier`:
// layers * kv_heads * tokens * tier_bytes_per_token. The formulas of MiniKV's appendix I.
double kv_cache_bytes(const KvTier& tier, std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim,
                      double tokens);

// ---------------------------------------------------------------------------------------------
// A unified page holds the tokens of one (request, layer, kv-head) in one tier, in six segments
// in this order: key codes, key metadata, value codes, value metadata, token scores (fp32),
// token positions (int32). Each segment starts on a 16-byte boundary so that a GPU thread can
// load it with 16-byte vector loads. Metadata is [units][pairs] of fp16 (scale, zero), or the
// fp32 per-head scale for FP8.
inline constexpr std::int64_t kPageSegmentAlign = 16;
inline constexpr std::int64_t kScoreBytes = 4;     // fp32 attention score per token
inline constexpr std::int64_t kPositionBytes = 4;  // int32 position per token

// How the codes of one token row are tiled inside a page so that a GPU warp's loads are
// contiguous (LeanKV section 5.4). The row of one token is `row_units` storage units of
// `unit_bytes` each: one byte of packed codes for INT and FP8, one fp16 or fp32 element otherwise.
//   keys   (reduction over the features):  [row_units / (vec * group)][tokens][group][vec]
//          vec: units one thread loads at once (16 bytes); group: threads sharing one key
//   values (reduction over the tokens):    [row_units / group][tokens / vec][group][vec]
//          vec: consecutive TOKENS of one unit loaded at once; group: units per thread group
// tokens per page is always a multiple of the value tiling's vec.
struct CodeTiling {
  std::int64_t unit_bytes = 1;
  std::int64_t row_units = 0;
  std::int64_t vec = 1;
  std::int64_t group = 1;
};
CodeTiling key_code_tiling(const KvFormat& format, std::int64_t head_dim);
CodeTiling value_code_tiling(const KvFormat& format, std::int64_t head_dim);

struct PageSegment {
  std::int64_t offset = 0;
  std::int64_t bytes = 0;
};

struct PageLayout {
  std::int64_t tokens = 0;  // tokens per page: a multiple of the tier's token unit (G for KIVI keys)
  PageSegment key_codes, key_meta, value_codes, value_meta, scores, positions;
  // A key-range tier's (KvTier::key_range) per-channel fp16 minimum and maximum of the page's keys,
  // [2][head_dim] (the min row, then the max row), the per-page end of the key metadata segment;
  // 0 bytes otherwise. Widened as each key is stored; a page with none holds (+inf, -inf).
  PageSegment key_range;
  std::int64_t used_bytes = 0;  // end of the last segment, <= page_bytes
};

// The largest token count (a multiple of the key and value token units and of the value tiling's
// vec) whose segments fit in
// page_bytes. InputError when not even one unit fits.
PageLayout page_layout(const KvTier& tier, std::int64_t head_dim, std::int64_t page_bytes);
// The bytes of a key-range tier's per-page range: 2 * head_dim fp16.
inline std::int64_t key_range_bytes(std::int64_t head_dim) { return 2 * head_dim * 2; }
// A page's stored key range: empty (every min +inf, every max -inf); widened by one key row of
// head_dim fp16 values; read into key_min / key_max [head_dim] (exact, as the values are fp16).
void clear_page_key_range(const PageLayout& layout, std::byte* page);
void widen_page_key_range(const PageLayout& layout, std::byte* page, std::span<const std::uint16_t> key);
void read_page_key_range(const PageLayout& layout, const std::byte* page, std::span<float> key_min,
                         std::span<float> key_max);

inline std::int64_t tokens_per_page(const KvTier& tier, std::int64_t head_dim, std::int64_t page_bytes) {
  return page_layout(tier, head_dim, page_bytes).tokens;
}

}  // namespace kvcheck
