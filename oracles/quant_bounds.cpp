// Quantization error bounds, evaluated in double so the check adds no rounding of its own.
#include "oracles/quant_bounds.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "reference/tensor.h"

namespace kvcheck {

namespace {
constexpr double kU = 0x1.0p-24;  // unit roundoff of float
}

double int_quant_error_bound(float x, float x_hat, float scale, float zero) {
  const double m = std::max({std::fabs(double{x}), std::fabs(double{zero}), std::fabs(double{x_hat})});
  return double{scale} / 2.0 + kIntBoundSlackUlps * kU * m + kSubnormalSlack;
}

double fp8_error_bound(float x, float x_hat, float scale) {
  return kE4M3RelativeBound * std::fabs(double{x}) + kE4M3SubnormalHalfStep * double{scale} +
         kFp8BoundSlackUlps * kU * (std::fabs(double{x}) + std::fabs(double{x_hat})) + kSubnormalSlack;
}

std::string check_int_quant_bound(const QuantSpec& spec, std::span<const float> x, std::span<const float> x_hat,
                                  std::span<const std::uint16_t> scales, std::span<const std::uint16_t> zeros,
                                  std::int64_t tokens, std::int64_t head_dim) {
  const std::int64_t groups = spec.granularity == Granularity::kPerTokenGroup ? head_dim / spec.group : 1;
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t c = 0; c < head_dim; ++c) {
      std::int64_t m = t;
      if (spec.granularity == Granularity::kPerChannel) m = t / spec.group * head_dim + c;
      if (spec.granularity == Granularity::kPerTokenGroup) m = t * groups + c / spec.group;
      const std::size_t i = static_cast<std::size_t>(t * head_dim + c);
      const float s = f16_bits_to_float(scales[m]), z = f16_bits_to_float(zeros[m]);
      const double err = std::fabs(double{x[i]} - double{x_hat[i]});
      const double bound = int_quant_error_bound(x[i], x_hat[i], s, z);
      if (!(err <= bound)) {
        return fmt::format("token {}, channel {}: x = {:a}, x̂ = {:a}, |x - x̂| = {:.9g} > bound {:.9g} (ŝ = {:a}, ẑ = {:a})",
                           t, c, x[i], x_hat[i], err, bound, s, z);
      }
    }
  }
  return {};
}

std::string check_fp8_bound(std::span<const float> x, std::span<const float> x_hat, float scale,
                            std::int64_t head_dim) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double err = std::fabs(double{x[i]} - double{x_hat[i]});
    const double bound = fp8_error_bound(x[i], x_hat[i], scale);
    if (!(err <= bound)) {
      return fmt::format("token {}, channel {}: x = {:a}, x̂ = {:a}, |x - x̂| = {:.9g} > bound {:.9g} (scale {:a})",
                         static_cast<std::int64_t>(i) / head_dim, static_cast<std::int64_t>(i) % head_dim, x[i],
                         x_hat[i], err, bound, scale);
    }
  }
  return {};
}

double fused_dot_tolerance(std::int64_t head_dim, double magnitude) {
  return 2.0 * static_cast<double>(head_dim + 4) * kU * magnitude + kSubnormalSlack;
}

}  // namespace kvcheck
