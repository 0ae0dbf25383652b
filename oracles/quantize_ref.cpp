// Reference quantizers. Deliberately plain: index arithmetic spelled out, one group at a time.
#include "oracles/quantize_ref.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "reference/tensor.h"

namespace kvcheck {

// fp16 bits of the neighbour toward +inf / -inf of a finite fp16 value. fp16 bit patterns of one
// sign are ordered by magnitude, so a neighbour is one step in the pattern, away from or toward 0.
namespace {
std::uint16_t f16_neighbour_up(std::uint16_t h) {
  if (h == 0x8000) return 0x0001;                          // -0: the smallest positive subnormal
  return (h & 0x8000) ? static_cast<std::uint16_t>(h - 1)  // negative: toward zero
                      : static_cast<std::uint16_t>(h + 1);
}
std::uint16_t f16_neighbour_down(std::uint16_t h) {
  if (h == 0x0000) return 0x8001;
  return (h & 0x8000) ? static_cast<std::uint16_t>(h + 1) : static_cast<std::uint16_t>(h - 1);
}
}  // namespace

std::uint16_t f16_round_up_ref(float x) {
  std::uint16_t h = float_to_f16_bits(x);  // nearest
  if (f16_bits_to_float(h) < x) h = f16_neighbour_up(h);
  return h;
}

std::uint16_t f16_round_down_ref(float x) {
  std::uint16_t h = float_to_f16_bits(x);
  if (f16_bits_to_float(h) > x) h = f16_neighbour_down(h);
  return h;
}

namespace {

// Flat indices of the elements that share metadata pair m, in scan order (token-major).
std::vector<std::size_t> group_members(const QuantSpec& spec, std::int64_t m, std::int64_t head_dim) {
  std::vector<std::size_t> out;
  auto add = [&](std::int64_t t, std::int64_t c) { out.push_back(static_cast<std::size_t>(t * head_dim + c)); };
  switch (spec.granularity) {
    case Granularity::kPerToken:
      for (std::int64_t c = 0; c < head_dim; ++c) add(m, c);
      break;
    case Granularity::kPerChannel: {
      const std::int64_t group = m / head_dim, channel = m % head_dim;
      for (std::int64_t t = group * spec.group; t < (group + 1) * spec.group; ++t) add(t, channel);
      break;
    }
    case Granularity::kPerTokenGroup: {
      const std::int64_t per_token = head_dim / spec.group;
      const std::int64_t token = m / per_token, first = m % per_token * spec.group;
      for (std::int64_t c = first; c < first + spec.group; ++c) add(token, c);
      break;
    }
  }
  return out;
}

// The value code L dequantizes to with scale s and zero z: the covering condition is top >= max.
float top_value(float levels, float s, float z) { return levels * s + z; }

}  // namespace

QuantizedRef quantize_ref(const QuantSpec& spec, std::span<const float> x, std::int64_t tokens,
                          std::int64_t head_dim) {
  if (x.size() != static_cast<std::size_t>(tokens * head_dim) || tokens % spec.token_group() != 0) {
    throw std::invalid_argument("quantize_ref: shape");
  }
  const std::int64_t pairs = spec.meta_count(tokens, head_dim);
  const float levels = static_cast<float>(spec.levels());
  std::vector<std::uint8_t> codes(x.size(), 0);  // one code per element, packed at the end
  QuantizedRef out;
  out.scales.resize(static_cast<std::size_t>(pairs));
  out.zeros.resize(static_cast<std::size_t>(pairs));
  for (std::int64_t m = 0; m < pairs; ++m) {
    const std::vector<std::size_t> members = group_members(spec, m, head_dim);
    float lo = x[members[0]], hi = x[members[0]];
    for (const std::size_t i : members) {
      if (!std::isfinite(x[i])) throw std::invalid_argument("quantize_ref: value");
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    if (lo < -65504.0f) throw std::invalid_argument("quantize_ref: no fp16 zero point");
    // Zero: rounded down, so it never exceeds the minimum.
    const std::uint16_t zero = f16_round_down_ref(lo);
    const float z = f16_bits_to_float(zero);
    // Scale: the smallest fp16 whose top code still reaches the maximum (0 for a constant group).
    std::uint16_t scale = 0;
    if (hi > z) {
      scale = f16_round_up_ref((hi - z) / levels);
      while (scale > 1 && top_value(levels, f16_bits_to_float(static_cast<std::uint16_t>(scale - 1)), z) >= hi) --scale;
      while (top_value(levels, f16_bits_to_float(scale), z) < hi) ++scale;
      if (scale >= 0x7C00) throw std::invalid_argument("quantize_ref: no fp16 scale");
    }
    out.scales[m] = scale;
    out.zeros[m] = zero;
    const float s = f16_bits_to_float(scale);
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (const std::size_t i : members) {
      const float t = (x[i] - z) * inv;
      codes[i] = static_cast<std::uint8_t>(std::clamp(std::rint(t), 0.0f, levels));
    }
  }
  // Pack: codes_per_byte codes per byte along each token's channels, the first in the low bits.
  const int per_byte = spec.codes_per_byte();
  out.codes.assign(x.size() / static_cast<std::size_t>(per_byte), 0);
  for (std::size_t i = 0; i < codes.size(); ++i) {
    out.codes[i / per_byte] |= static_cast<std::uint8_t>(codes[i] << (spec.bits * static_cast<int>(i % per_byte)));
  }
  return out;
}

std::vector<float> dequantize_ref(const QuantSpec& spec, const QuantizedRef& q, std::int64_t tokens,
                                  std::int64_t head_dim) {
  std::vector<float> out(static_cast<std::size_t>(tokens * head_dim));
  const int per_byte = spec.codes_per_byte();
  for (std::int64_t m = 0; m < spec.meta_count(tokens, head_dim); ++m) {
    const float s = f16_bits_to_float(q.scales[m]), z = f16_bits_to_float(q.zeros[m]);
    for (const std::size_t i : group_members(spec, m, head_dim)) {
      const int code = (q.codes[i / per_byte] >> (spec.bits * static_cast<int>(i % per_byte))) & spec.levels();
      out[i] = static_cast<float>(code) * s + z;
    }
  }
  return out;
}

double e4m3_value_ref(std::uint8_t code) {
  const int sign = code >> 7, exponent = (code >> 3) & 0xF, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, -9)                     // subnormal
                                         : std::ldexp(8 + mantissa, exponent - 7 - 3);  // 1.mmm * 2^(e-7)
  return sign ? -magnitude : magnitude;
}

std::uint8_t e4m3_from_float_ref(float y) {
  // The value of every finite non-negative code, computed once, increasing with the code.
  static const std::array<double, 0x7F> values = [] {
    std::array<double, 0x7F> v{};
    for (std::uint8_t c = 0; c <= 0x7E; ++c) v[c] = e4m3_value_ref(c);
    return v;
  }();
  const double a = std::fabs(double{y});
  std::uint8_t best = 0;  // NaN: code 0, as a search that never finds a nearer value
  if (!std::isnan(a)) {
    // The nearest value: the last code at or below a, or the next one (the per-step oracle calls
    // this for every held element of every step, so a binary search, not a scan of 126 codes).
    // Equidistant: the even code. Beyond 448: the largest finite code.
    const auto above = std::upper_bound(values.begin(), values.end(), a);
    const auto lo = static_cast<std::uint8_t>(std::max<std::ptrdiff_t>(0, above - values.begin() - 1));
    best = lo;
    if (lo < 0x7E) {
      const double d_lo = a - values[lo], d_hi = values[lo + 1] - a;
      if (d_hi < d_lo || (d_hi == d_lo && ((lo + 1) & 1) == 0)) best = static_cast<std::uint8_t>(lo + 1);
    }
  }
  return static_cast<std::uint8_t>((std::signbit(y) ? 0x80 : 0) | best);
}

Fp8Ref quantize_fp8_e4m3_ref(std::span<const float> x) {
  float amax = 0.0f;
  for (const float v : x) amax = std::max(amax, std::fabs(v));
  Fp8Ref out;
  out.scale = std::max(amax / 448.0f, std::numeric_limits<float>::min());
  for (const float v : x) out.codes.push_back(e4m3_from_float_ref(v / out.scale));
  return out;
}

std::vector<float> dequantize_fp8_e4m3_ref(const Fp8Ref& q) {
  std::vector<float> out;
  for (const std::uint8_t c : q.codes) out.push_back(static_cast<float>(e4m3_value_ref(c)) * q.scale);
  return out;
}

}  // namespace kvcheck
