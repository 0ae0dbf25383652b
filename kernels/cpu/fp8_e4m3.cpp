// FP8 E4M3 CPU twin. The scalar conversions are kernels/quant_math.h, shared with CUDA.
#include "kernels/cpu/fp8_e4m3.h"

#include <stdexcept>

#include <fmt/format.h>

#include "kernels/quant_errors.h"
#include "kernels/quant_math.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

constexpr const char* kFormat = "fp8-e4m3";

void check_shape(std::size_t x, std::int64_t tokens, std::int64_t head_dim, std::size_t codes) {
  if (tokens < 0 || head_dim <= 0 || x != static_cast<std::size_t>(tokens * head_dim) || codes != x) {
    throw std::invalid_argument(
        fmt::format("fp8 e4m3: {} values and {} codes for {} tokens of {} channels", x, codes, tokens, head_dim));
  }
}

[[noreturn]] void report_non_finite(std::span<const float> x, std::int64_t head_dim, const KvLocation& at) {
  throw_if_unquantizable(x.data(), static_cast<std::int64_t>(x.size()) / head_dim, head_dim, at, kFormat, false);
  throw std::logic_error("fp8 e4m3: non-finite value flagged but not found");
}

void encode(std::span<const float> x, float scale, std::span<std::uint8_t> codes) {
  for (std::size_t i = 0; i < x.size(); ++i) codes[i] = quant::e4m3_from_float(quant::div_rn(x[i], scale));
}

}  // namespace

float quantize_fp8_e4m3(std::span<const float> x, std::int64_t tokens, std::int64_t head_dim, const KvLocation& at,
                        std::span<std::uint8_t> codes) {
  check_shape(x.size(), tokens, head_dim, codes.size());
  float amax = 0.0f, poison = 0.0f;
  for (const float v : x) {
    amax = quant::max_f(amax, quant::abs_f(v));
    poison += v * 0.0f;
  }
  if (poison != 0.0f || !quant::is_finite(amax)) report_non_finite(x, head_dim, at);
  const float scale = quant::fp8_scale_for_amax(amax);
  encode(x, scale, codes);
  return scale;
}

void quantize_fp8_e4m3_with_scale(std::span<const float> x, std::int64_t tokens, std::int64_t head_dim, float scale,
                                  const KvLocation& at, std::span<std::uint8_t> codes) {
  check_shape(x.size(), tokens, head_dim, codes.size());
  if (!(scale >= quant::kFloatMinNormal) || !quant::is_finite(scale)) {
    throw input_error(fmt::format("quantize {} ({})", at.tensor, kFormat),
                      fmt::format("layer {}, head {}", at.layer, at.head),
                      "scale must be a finite normal positive float, got {}", scale);
  }
  float poison = 0.0f;
  for (const float v : x) poison += v * 0.0f;
  if (poison != 0.0f) report_non_finite(x, head_dim, at);
  encode(x, scale, codes);
}

void dequantize_fp8_e4m3(std::span<const std::uint8_t> codes, float scale, std::span<float> out) {
  if (codes.size() != out.size()) {
    throw std::invalid_argument(fmt::format("fp8 e4m3: {} codes for {} outputs", codes.size(), out.size()));
  }
  for (std::size_t i = 0; i < codes.size(); ++i) out[i] = quant::mul_rn(quant::e4m3_to_float(codes[i]), scale);
}

void dot_fp8_e4m3(std::span<const float> q, std::span<const std::uint8_t> codes, float scale, std::int64_t tokens,
                  std::int64_t head_dim, std::span<float> scores) {
  if (q.size() != static_cast<std::size_t>(head_dim) || codes.size() != static_cast<std::size_t>(tokens * head_dim) ||
      scores.size() != static_cast<std::size_t>(tokens)) {
    throw std::invalid_argument(fmt::format("dot_fp8_e4m3: query {}, codes {}, scores {} for {} tokens of {}",
                                            q.size(), codes.size(), scores.size(), tokens, head_dim));
  }
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::uint8_t* c = codes.data() + t * head_dim;
    float acc = 0.0f;
    for (std::int64_t i = 0; i < head_dim; ++i) acc += q[i] * quant::e4m3_to_float(c[i]);
    scores[t] = acc * scale;
  }
}

}  // namespace kvcheck
