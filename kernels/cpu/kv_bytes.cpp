// Bytes per token per head and unified-page layouts.
#include "kernels/cpu/kv_bytes.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/quant_math.h"
#include "reference/errors.h"

namespace kvcheck {

FormatBytes format_bytes(const KvFormat& format, std::int64_t head_dim) {
  if (head_dim <= 0) throw input_error("KV format " + kv_format_name(format), "head_dim", "must be positive, got {}", head_dim);
  FormatBytes b;
  switch (format.dtype) {
    case KvDType::kFp32:
      b.code_bytes_per_token = 4 * head_dim;
      break;
    case KvDType::kFp16:
      b.code_bytes_per_token = 2 * head_dim;
      break;
    case KvDType::kFp8E4M3:
      b.code_bytes_per_token = head_dim;
      b.meta_bytes_per_page = 4;
      break;
    case KvDType::kInt: {
      const QuantSpec& s = format.spec;
      validate(s, head_dim);
      constexpr std::int64_t kPairBytes = 4;  // fp16 scale + fp16 zero
      b.code_bytes_per_token = s.row_bytes(head_dim);
      b.tokens_per_unit = s.token_group();
      b.meta_bytes_per_unit = kPairBytes * s.meta_count(s.token_group(), head_dim);
      break;
    }
  }
  return b;
}

double tier_bytes_per_token(const KvTier& tier, std::int64_t head_dim) {
  return format_bytes(tier.key, head_dim).bytes_per_token() + format_bytes(tier.value, head_dim).bytes_per_token();
}

double kv_cache_bytes(const KvTier& tier, std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim,
                      double tokens) {
  return static_cast<double>(layers * kv_heads) * tokens * tier_bytes_per_token(tier, head_dim);
}

namespace {

std::int64_t largest_divisor_at_most(std::int64_t n, std::int64_t cap) {
  for (std::int64_t d = std::min(n, cap); d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

std::int64_t unit_bytes_of(const KvFormat& format) {
  switch (format.dtype) {
    case KvDType::kFp32: return 4;
    case KvDType::kFp16: return 2;
    case KvDType::kFp8E4M3:
    case KvDType::kInt: return 1;
  }
  return 1;
}

CodeTiling row_tiling(const KvFormat& format, std::int64_t head_dim) {
  CodeTiling t;
  t.unit_bytes = unit_bytes_of(format);
  t.row_units = format_bytes(format, head_dim).code_bytes_per_token / t.unit_bytes;
  return t;
}

}  // namespace

CodeTiling key_code_tiling(const KvFormat& format, std::int64_t head_dim) {
  CodeTiling t = row_tiling(format, head_dim);
  constexpr std::int64_t kVectorBytes = 16;  // one 128-bit load per thread
  constexpr std::int64_t kMaxGroup = 4;      // threads cooperating on one key
  t.vec = std::gcd(kVectorBytes / t.unit_bytes, t.row_units);
  t.group = largest_divisor_at_most(t.row_units / t.vec, kMaxGroup);
  return t;
}

CodeTiling value_code_tiling(const KvFormat& format, std::int64_t head_dim) {
  CodeTiling t = row_tiling(format, head_dim);
  constexpr std::int64_t kVectorBytes = 4;  // one 32-bit load of consecutive tokens
  constexpr std::int64_t kMaxGroup = 8;     // units per thread group
  t.vec = std::max<std::int64_t>(1, kVectorBytes / t.unit_bytes);
  t.group = largest_divisor_at_most(t.row_units, kMaxGroup);
  return t;
}

namespace {

std::int64_t align_up(std::int64_t n) { return (n + kPageSegmentAlign - 1) / kPageSegmentAlign * kPageSegmentAlign; }

PageLayout layout_for(const FormatBytes& k, const FormatBytes& v, std::int64_t key_range, std::int64_t n) {
  PageLayout p;
  p.tokens = n;
  std::int64_t at = 0;
  auto place = [&at](PageSegment& s, std::int64_t bytes) {
    s.offset = align_up(at);
    s.bytes = bytes;
    at = s.offset + bytes;
  };
  place(p.key_codes, n * k.code_bytes_per_token);
  place(p.key_meta, k.meta_bytes(n) + k.meta_bytes_per_page + key_range);
  p.key_range = {p.key_meta.offset + p.key_meta.bytes - key_range, key_range};
  place(p.value_codes, n * v.code_bytes_per_token);
  place(p.value_meta, v.meta_bytes(n) + v.meta_bytes_per_page);
  place(p.scores, n * kScoreBytes);
  place(p.positions, n * kPositionBytes);
  p.used_bytes = at;
  return p;
}

// The range's fp16 words: [0, d) the minimum, [d, 2d) the maximum.
std::span<std::uint16_t> range_words(const PageLayout& layout, std::byte* page) {
  return {reinterpret_cast<std::uint16_t*>(page + layout.key_range.offset),
          static_cast<std::size_t>(layout.key_range.bytes / 2)};
}

}  // namespace

void clear_page_key_range(const PageLayout& layout, std::byte* page) {
  const std::span<std::uint16_t> w = range_words(layout, page);
  const std::size_t d = w.size() / 2;
  std::fill(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(d), std::uint16_t{0x7C00});  // +inf
  std::fill(w.begin() + static_cast<std::ptrdiff_t>(d), w.end(), std::uint16_t{0xFC00});    // -inf
}

void widen_page_key_range(const PageLayout& layout, std::byte* page, std::span<const std::uint16_t> key) {
  const std::span<std::uint16_t> w = range_words(layout, page);
  const std::size_t d = w.size() / 2;
  if (key.size() != d) throw std::logic_error(fmt::format("page key range: a key of {} values for {}", key.size(), d));
  for (std::size_t c = 0; c < d; ++c) {
    const float x = quant::f16_to_float(key[c]);
    if (x < quant::f16_to_float(w[c])) w[c] = key[c];
    if (x > quant::f16_to_float(w[d + c])) w[d + c] = key[c];
  }
}

void read_page_key_range(const PageLayout& layout, const std::byte* page, std::span<float> key_min,
                         std::span<float> key_max) {
  const std::span<std::uint16_t> w = range_words(layout, const_cast<std::byte*>(page));
  const std::size_t d = w.size() / 2;
  if (d == 0 || key_min.size() != d || key_max.size() != d) {
    throw std::logic_error(fmt::format("page key range: {} and {} values for a stored range of {}", key_min.size(),
                                       key_max.size(), d));
  }
  for (std::size_t c = 0; c < d; ++c) {
    key_min[c] = quant::f16_to_float(w[c]);
    key_max[c] = quant::f16_to_float(w[d + c]);
  }
}

PageLayout page_layout(const KvTier& tier, std::int64_t head_dim, std::int64_t page_bytes) {
  const FormatBytes k = format_bytes(tier.key, head_dim);
  const FormatBytes v = format_bytes(tier.value, head_dim);
  if (tier.key_range && tier.key.dtype != KvDType::kFp16) {
    throw input_error("unified page", "key range", "a page stores its key range for fp16 keys only, not {}",
                      kv_format_name(tier.key));
  }
  const std::int64_t range = tier.key_range ? key_range_bytes(head_dim) : 0;
  const std::int64_t unit =
      std::lcm(std::lcm(k.tokens_per_unit, v.tokens_per_unit), value_code_tiling(tier.value, head_dim).vec);
  // Without alignment padding and per-page copies n tokens take n * per_token bytes: an upper
  // bound on n to walk down from.
  const double per_token = k.bytes_per_token() + v.bytes_per_token() + kScoreBytes + kPositionBytes;
  std::int64_t n = static_cast<std::int64_t>(static_cast<double>(page_bytes) / per_token) / unit * unit;
  while (n > 0 && layout_for(k, v, range, n).used_bytes > page_bytes) n -= unit;
  if (n <= 0) {
    throw input_error("unified page", "page_bytes",
                      "{} bytes cannot hold {} token(s) of tier {} at head_dim {}", page_bytes, unit,
                      kv_tier_name(tier), head_dim);
  }
  return layout_for(k, v, range, n);
}

}  // namespace kvcheck
