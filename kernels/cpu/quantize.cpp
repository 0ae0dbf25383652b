// CPU twin of the integer KV quantizers. One pass for the group statistics (min, max and a
// finiteness check), one for the codes; the scalar work is kernels/quant_math.h, the same code
// the CUDA kernels run.
#include "kernels/cpu/quantize.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/bitpack.h"
#include "kernels/quant_errors.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/quant_math.h"
#include "reference/errors.h"

namespace kvcheck {

using quant::f16_to_float;

namespace {

void check_sizes(const QuantSpec& spec, std::size_t x_size, std::int64_t tokens, std::int64_t head_dim,
                 std::size_t codes, std::size_t scales, std::size_t zeros, const char* what) {
  if (tokens < 0 || x_size != static_cast<std::size_t>(tokens * head_dim)) {
    throw std::invalid_argument(fmt::format("{}: {} values for {} tokens of {} channels", what, x_size, tokens, head_dim));
  }
  if (tokens % spec.token_group() != 0) {
    throw std::invalid_argument(fmt::format("{}: {} tokens are not whole groups of {} (quantize_block keeps the rest "
                                            "as the fp16 residual)", what, tokens, spec.token_group()));
  }
  const auto code_bytes = static_cast<std::size_t>(tokens * spec.row_bytes(head_dim));
  const auto meta = static_cast<std::size_t>(spec.meta_count(tokens, head_dim));
  if (codes != code_bytes || scales != meta || zeros != meta) {
    throw std::invalid_argument(fmt::format("{} {}: buffers hold {} code bytes, {} scales, {} zeros; need {}, {}, {}",
                                            what, quant_spec_name(spec), codes, scales, zeros, code_bytes, meta, meta));
  }
}

// min and max of n values, and whether all are finite and the minimum fits the fp16 zero.
struct Stats {
  float mn, mx;
  bool ok;
};

Stats stats_scalar(const float* x, std::int64_t n) {
  float mn = x[0], mx = x[0], poison = 0.0f;  // poison: x * 0 is NaN for NaN and ±Inf
  for (std::int64_t i = 0; i < n; ++i) {
    mn = quant::min_f(mn, x[i]);
    mx = quant::max_f(mx, x[i]);
    poison += x[i] * 0.0f;
  }
  return {mn, mx, poison == 0.0f && mn >= -quant::kF16Max};
}

// stats_scalar eight lanes at a time (SSE, part of the x86-64 baseline): the same result. The
// minimum and maximum of a set are what they are in any order, except which of -0 and +0 wins a
// tie (min_f keeps the first), so a zero extreme is recomputed in order; the poison sum is 0 or
// NaN in any order. minps(a, b) is a < b ? a : b and maxps(a, b) is a > b ? a : b, min_f's and
// max_f's selects. Without the lanes, each element waits on the previous one's min, max and add.
Stats stats(const float* x, std::int64_t n) {
#if defined(__x86_64__)
  if (n < 16) return stats_scalar(x, n);
  __m128 mn0 = _mm_loadu_ps(x), mn1 = _mm_loadu_ps(x + 4);
  __m128 mx0 = mn0, mx1 = mn1;
  const __m128 zero = _mm_setzero_ps();
  __m128 p0 = _mm_mul_ps(mn0, zero), p1 = _mm_mul_ps(mn1, zero);
  std::int64_t i = 8;
  for (; i + 8 <= n; i += 8) {
    const __m128 v0 = _mm_loadu_ps(x + i), v1 = _mm_loadu_ps(x + i + 4);
    mn0 = _mm_min_ps(v0, mn0);
    mn1 = _mm_min_ps(v1, mn1);
    mx0 = _mm_max_ps(v0, mx0);
    mx1 = _mm_max_ps(v1, mx1);
    p0 = _mm_add_ps(p0, _mm_mul_ps(v0, zero));
    p1 = _mm_add_ps(p1, _mm_mul_ps(v1, zero));
  }
  // Halve in registers down to lane 0.
  __m128 mn = _mm_min_ps(mn0, mn1), mx = _mm_max_ps(mx0, mx1), p = _mm_add_ps(p0, p1);
  mn = _mm_min_ps(mn, _mm_movehl_ps(mn, mn));
  mx = _mm_max_ps(mx, _mm_movehl_ps(mx, mx));
  p = _mm_add_ps(p, _mm_movehl_ps(p, p));
  mn = _mm_min_ss(mn, _mm_shuffle_ps(mn, mn, 1));
  mx = _mm_max_ss(mx, _mm_shuffle_ps(mx, mx, 1));
  p = _mm_add_ss(p, _mm_shuffle_ps(p, p, 1));
  float lo = _mm_cvtss_f32(mn), hi = _mm_cvtss_f32(mx), poison = _mm_cvtss_f32(p);
  for (; i < n; ++i) {
    lo = quant::min_f(lo, x[i]);
    hi = quant::max_f(hi, x[i]);
    poison += x[i] * 0.0f;
  }
  if (lo == 0.0f || hi == 0.0f) return stats_scalar(x, n);
  return {lo, hi, poison == 0.0f && lo >= -quant::kF16Max};
#else
  return stats_scalar(x, n);
#endif
}

// Rows [row0, row0 + rows) of the input as float: the input itself, or converted from fp16.
const float* float_rows(std::span<const float> x, std::int64_t row0, std::int64_t rows, std::int64_t d,
                        std::vector<float>&) {
  (void)rows;
  return x.data() + row0 * d;
}
const float* float_rows(std::span<const std::uint16_t> x, std::int64_t row0, std::int64_t rows, std::int64_t d,
                        std::vector<float>& buffer) {
  buffer.resize(static_cast<std::size_t>(rows * d));
  row_ops::f16_row_to_float(x.data() + row0 * d, rows * d, buffer.data());
  return buffer.data();
}

[[noreturn]] void report_bad_values(const float* rows, std::int64_t row0, std::int64_t n_rows, std::int64_t d,
                                    const QuantSpec& spec, const KvLocation& at) {
  KvLocation here = at;
  here.first_token = at.first_token + row0;
  throw_if_unquantizable(rows, n_rows, d, here, quant_spec_name(spec).c_str(), true);
  throw std::logic_error("quantize: group statistics flagged a value that throw_if_unquantizable accepts");
}

[[noreturn]] void report_wide_group(const QuantSpec& spec, const KvLocation& at, std::int64_t t0, std::int64_t nt,
                                    std::int64_t c0, std::int64_t nc, float mn, float mx) {
  throw input_error(fmt::format("quantize {} ({})", at.tensor, quant_spec_name(spec)),
                    fmt::format("layer {}, head {}, tokens {}..{}, channels {}..{}", at.layer, at.head,
                                at.first_token + t0, at.first_token + t0 + nt - 1, c0, c0 + nc - 1),
                    "range [{}, {}] needs a scale beyond the fp16 range (max - min <= 65504 x {} at {} bits)", mn, mx,
                    spec.levels(), spec.bits);
}

template <typename In>
void quantize_any(const QuantSpec& spec, std::span<const In> x, std::int64_t tokens, std::int64_t d,
                  const KvLocation& at, std::span<std::uint8_t> codes, std::span<std::uint16_t> scales,
                  std::span<std::uint16_t> zeros) {
  validate(spec, d);
  check_sizes(spec, x.size(), tokens, d, codes.size(), scales.size(), zeros.size(), "quantize");
  const float levels = static_cast<float>(spec.levels());
  const std::int64_t row_bytes = spec.row_bytes(d);
  std::vector<float> buffer;
  std::vector<std::uint8_t> row_codes(static_cast<std::size_t>(d));

  if (spec.granularity == Granularity::kPerChannel) {
    const std::int64_t G = spec.group;
    std::vector<float> mn(static_cast<std::size_t>(d)), mx(mn.size()), zero(mn.size()), inv(mn.size()),
        poisons(mn.size());
    for (std::int64_t g0 = 0; g0 < tokens; g0 += G) {
      const float* rows = float_rows(x, g0, G, d, buffer);
      // poison per channel (0 or NaN, whatever the order): the loop over channels has no chain.
      for (std::int64_t c = 0; c < d; ++c) {
        mn[c] = mx[c] = rows[c];
        poisons[c] = 0.0f;
      }
      for (std::int64_t t = 0; t < G; ++t) {
        const float* r = rows + t * d;
        for (std::int64_t c = 0; c < d; ++c) {
          mn[c] = quant::min_f(mn[c], r[c]);
          mx[c] = quant::max_f(mx[c], r[c]);
          poisons[c] += r[c] * 0.0f;
        }
      }
      float poison = 0.0f;
      for (std::int64_t c = 0; c < d; ++c) poison += poisons[c];
      const std::int64_t meta0 = g0 / G * d;
      for (std::int64_t c = 0; c < d; ++c) {
        if (!(poison == 0.0f && mn[c] >= -quant::kF16Max)) report_bad_values(rows, g0, G, d, spec, at);
        const quant::QuantParams p = quant::choose_params(mn[c], mx[c], spec.bits);
        if (p.scale == quant::kF16Inf) report_wide_group(spec, at, g0, G, c, 1, mn[c], mx[c]);
        scales[meta0 + c] = p.scale;
        zeros[meta0 + c] = p.zero;
        zero[c] = f16_to_float(p.zero);
        inv[c] = quant::inverse_scale(f16_to_float(p.scale));
      }
      for (std::int64_t t = 0; t < G; ++t) {
        const float* r = rows + t * d;
        for (std::int64_t c = 0; c < d; ++c) {
          row_codes[c] = static_cast<std::uint8_t>(quant::quantize_value(r[c], zero[c], inv[c], levels));
        }
        pack_codes(spec.bits, row_codes, codes.subspan((g0 + t) * row_bytes, row_bytes));
      }
    }
    return;
  }

  // kPerToken is kPerTokenGroup with one group of head_dim channels.
  const std::int64_t g = spec.granularity == Granularity::kPerToken ? d : spec.group;
  const std::int64_t groups = d / g;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* r = float_rows(x, t, 1, d, buffer);
    for (std::int64_t k = 0; k < groups; ++k) {
      const float* v = r + k * g;
      const Stats s = stats(v, g);
      if (!s.ok) report_bad_values(r, t, 1, d, spec, at);
      const quant::QuantParams p = quant::choose_params(s.mn, s.mx, spec.bits);
      if (p.scale == quant::kF16Inf) report_wide_group(spec, at, t, 1, k * g, g, s.mn, s.mx);
      scales[t * groups + k] = p.scale;
      zeros[t * groups + k] = p.zero;
      const float zero = f16_to_float(p.zero);
      const float inv = quant::inverse_scale(f16_to_float(p.scale));
      std::uint8_t* out = row_codes.data() + k * g;
      for (std::int64_t c = 0; c < g; ++c) out[c] = static_cast<std::uint8_t>(quant::quantize_value(v[c], zero, inv, levels));
    }
    pack_codes(spec.bits, row_codes, codes.subspan(t * row_bytes, row_bytes));
  }
}

}  // namespace

void throw_quantize_error(const QuantSpec& spec, const float* x, std::int64_t tokens, std::int64_t head_dim,
                          const KvLocation& at) {
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(tokens * spec.row_bytes(head_dim)));
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(spec.meta_count(tokens, head_dim))), zeros(scales.size());
  quantize(spec, std::span<const float>(x, static_cast<std::size_t>(tokens * head_dim)), tokens, head_dim, at, codes,
           scales, zeros);
}

void quantize(const QuantSpec& spec, std::span<const float> x, std::int64_t tokens, std::int64_t head_dim,
              const KvLocation& at, std::span<std::uint8_t> codes, std::span<std::uint16_t> scales,
              std::span<std::uint16_t> zeros) {
  quantize_any(spec, x, tokens, head_dim, at, codes, scales, zeros);
}

void quantize_f16(const QuantSpec& spec, std::span<const std::uint16_t> x, std::int64_t tokens, std::int64_t head_dim,
                  const KvLocation& at, std::span<std::uint8_t> codes, std::span<std::uint16_t> scales,
                  std::span<std::uint16_t> zeros) {
  quantize_any(spec, x, tokens, head_dim, at, codes, scales, zeros);
}

void dequantize(const QuantSpec& spec, std::span<const std::uint8_t> codes, std::span<const std::uint16_t> scales,
                std::span<const std::uint16_t> zeros, std::int64_t tokens, std::int64_t d, std::span<float> out) {
  validate(spec, d);
  check_sizes(spec, out.size(), tokens, d, codes.size(), scales.size(), zeros.size(), "dequantize");
  const std::int64_t row_bytes = spec.row_bytes(d);
  std::vector<std::uint8_t> row_codes(static_cast<std::size_t>(d));
  std::vector<float> sf, zf;
  if (spec.granularity == Granularity::kPerChannel) {
    sf.resize(static_cast<std::size_t>(d));
    zf.resize(sf.size());
  }
  const std::int64_t g = spec.granularity == Granularity::kPerTokenGroup ? spec.group : d;
  const std::int64_t groups = d / g;
  for (std::int64_t t = 0; t < tokens; ++t) {
    unpack_codes(spec.bits, codes.subspan(t * row_bytes, row_bytes), row_codes);
    float* o = out.data() + t * d;
    if (spec.granularity == Granularity::kPerChannel) {
      if (t % spec.group == 0) {
        const std::int64_t meta0 = t / spec.group * d;
        for (std::int64_t c = 0; c < d; ++c) {
          sf[c] = f16_to_float(scales[meta0 + c]);
          zf[c] = f16_to_float(zeros[meta0 + c]);
        }
      }
      for (std::int64_t c = 0; c < d; ++c) o[c] = quant::dequantize_value(row_codes[c], sf[c], zf[c]);
      continue;
    }
    for (std::int64_t k = 0; k < groups; ++k) {
      const float s = f16_to_float(scales[t * groups + k]);
      const float z = f16_to_float(zeros[t * groups + k]);
      for (std::int64_t c = k * g; c < (k + 1) * g; ++c) o[c] = quant::dequantize_value(row_codes[c], s, z);
    }
  }
}

void dot_dequantized(const QuantSpec& spec, std::span<const float> q, std::span<const std::uint8_t> codes,
                     std::span<const std::uint16_t> scales, std::span<const std::uint16_t> zeros, std::int64_t tokens,
                     std::int64_t d, std::span<float> scores) {
  validate(spec, d);
  check_sizes(spec, static_cast<std::size_t>(tokens * d), tokens, d, codes.size(), scales.size(), zeros.size(),
              "dot_dequantized");
  if (q.size() != static_cast<std::size_t>(d) || scores.size() != static_cast<std::size_t>(tokens)) {
    throw std::invalid_argument(fmt::format("dot_dequantized: query of {} (head_dim {}), {} scores for {} tokens",
                                            q.size(), d, scores.size(), tokens));
  }
  const std::int64_t row_bytes = spec.row_bytes(d);
  std::vector<std::uint8_t> row_codes(static_cast<std::size_t>(d));
  if (spec.granularity == Granularity::kPerChannel) {
    // Per group of G tokens: fold the channel scales into the query, the zeros into one bias.
    std::vector<float> qs(static_cast<std::size_t>(d));
    float bias = 0.0f;
    for (std::int64_t t = 0; t < tokens; ++t) {
      if (t % spec.group == 0) {
        const std::int64_t meta0 = t / spec.group * d;
        bias = 0.0f;
        for (std::int64_t c = 0; c < d; ++c) {
          qs[c] = q[c] * f16_to_float(scales[meta0 + c]);
          bias += q[c] * f16_to_float(zeros[meta0 + c]);
        }
      }
      unpack_codes(spec.bits, codes.subspan(t * row_bytes, row_bytes), row_codes);
      float acc = 0.0f;
      for (std::int64_t c = 0; c < d; ++c) acc += qs[c] * static_cast<float>(row_codes[c]);
      scores[t] = acc + bias;
    }
    return;
  }
  const std::int64_t g = spec.granularity == Granularity::kPerTokenGroup ? spec.group : d;
  const std::int64_t groups = d / g;
  std::vector<float> q_sums(static_cast<std::size_t>(groups), 0.0f);  // Σ q_c per channel group
  for (std::int64_t k = 0; k < groups; ++k) {
    for (std::int64_t c = k * g; c < (k + 1) * g; ++c) q_sums[k] += q[c];
  }
  for (std::int64_t t = 0; t < tokens; ++t) {
    unpack_codes(spec.bits, codes.subspan(t * row_bytes, row_bytes), row_codes);
    float score = 0.0f;
    for (std::int64_t k = 0; k < groups; ++k) {
      float acc = 0.0f;
      for (std::int64_t c = k * g; c < (k + 1) * g; ++c) acc += q[c] * static_cast<float>(row_codes[c]);
      score += f16_to_float(scales[t * groups + k]) * acc + f16_to_float(zeros[t * groups + k]) * q_sums[k];
    }
    scores[t] = score;
  }
}

QuantizedBlock quantize_block(const QuantSpec& spec, std::span<const float> x, std::int64_t tokens,
                              std::int64_t head_dim, const KvLocation& at) {
  validate(spec, head_dim);
  if (tokens < 0 || x.size() != static_cast<std::size_t>(tokens * head_dim)) {
    throw std::invalid_argument(fmt::format("quantize_block: {} values for {} tokens of {} channels", x.size(), tokens,
                                            head_dim));
  }
  QuantizedBlock b;
  b.spec = spec;
  b.head_dim = head_dim;
  b.tokens = tokens / spec.token_group() * spec.token_group();
  b.residual_tokens = tokens - b.tokens;
  b.codes.resize(static_cast<std::size_t>(b.tokens * spec.row_bytes(head_dim)));
  b.scales.resize(static_cast<std::size_t>(spec.meta_count(b.tokens, head_dim)));
  b.zeros.resize(b.scales.size());
  const auto quantized_values = static_cast<std::size_t>(b.tokens * head_dim);
  quantize(spec, x.first(quantized_values), b.tokens, head_dim, at, b.codes, b.scales, b.zeros);
  // The residual is held to the same rules: a NaN is never stored, in fp16 either.
  const std::span<const float> rest = x.subspan(quantized_values);
  KvLocation rest_at = at;
  rest_at.first_token = at.first_token + b.tokens;
  throw_if_unquantizable(rest.data(), b.residual_tokens, head_dim, rest_at, "fp16 residual", false);
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (std::fabs(rest[i]) > quant::kF16Max) {
      const auto t = static_cast<std::int64_t>(i) / head_dim, c = static_cast<std::int64_t>(i) % head_dim;
      throw input_error(fmt::format("quantize {} (fp16 residual)", at.tensor),
                        fmt::format("layer {}, head {}, token {}, channel {}", at.layer, at.head, rest_at.first_token + t, c),
                        "{} is beyond the fp16 range (|x| <= 65504) of the residual", rest[i]);
    }
  }
  b.residual.resize(rest.size());
  for (std::size_t i = 0; i < rest.size(); ++i) b.residual[i] = quant::f16_from_float(rest[i]);
  return b;
}

std::vector<float> dequantize_block(const QuantizedBlock& b) {
  std::vector<float> out(static_cast<std::size_t>((b.tokens + b.residual_tokens) * b.head_dim));
  const auto quantized_values = static_cast<std::size_t>(b.tokens * b.head_dim);
  dequantize(b.spec, b.codes, b.scales, b.zeros, b.tokens, b.head_dim,
             std::span<float>(out).first(quantized_values));
  for (std::size_t i = 0; i < b.residual.size(); ++i) out[quantized_values + i] = f16_to_float(b.residual[i]);
  return out;
}

}  // namespace kvcheck
