// Tightness of the quantization bounds (oracles/quant_bounds.h): blocks built so that the
// quantizer's error reaches the bound, for every integer format (8/4/2 bits per token, per channel
// group, per token group) and FP8 E4M3. Each case asserts the error stays within the bound (as
// QuantizeProps does on ordinary data) and that its worst element reaches kTight of it: a bound
// made looser by 1/kTight ≈ 1.11 or more fails here, a checker drifting to a lenient bound cannot
// pass the gate silently.
//   RC_PARAMS="seed=7 max_success=10000" build/properties/kvcheck_property_tests --gtest_filter='QuantTightnessProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/quantize.h"
#include "oracles/quant_bounds.h"
#include "properties/support/property_check.h"
#include "properties/support/quant_cases.h"
#include "reference/tensor.h"

namespace kvcheck {
namespace {

using testing::check_property;

constexpr int kGateCases = 200;
constexpr double kTight = 0.9;  // the worst element of each case uses at least this share of its bound

// The element indices ([tokens][head_dim] row-major) that share metadata entry m, for every m.
std::vector<std::vector<std::size_t>> metadata_groups(const QuantSpec& spec, std::int64_t tokens, std::int64_t d) {
  std::vector<std::vector<std::size_t>> groups(static_cast<std::size_t>(spec.meta_count(tokens, d)));
  const std::int64_t per_token_groups = spec.granularity == Granularity::kPerTokenGroup ? d / spec.group : 1;
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t c = 0; c < d; ++c) {
      std::int64_t m = t;
      if (spec.granularity == Granularity::kPerChannel) m = t / spec.group * d + c;
      if (spec.granularity == Granularity::kPerTokenGroup) m = t * per_token_groups + c / spec.group;
      groups[static_cast<std::size_t>(m)].push_back(static_cast<std::size_t>(t * d + c));
    }
  }
  return groups;
}

// One group at its worst: minimum ẑ (an fp16 number, so it is the zero point), maximum ẑ + L·ŝ
// (so ŝ, an fp16 number, is the covering scale), every other element at a half step
// ẑ + (k + 1/2)·ŝ, which no code represents better than ŝ/2. ŝ ranges over fp16 subnormals
// (2^-24 upward) to large normals; all sums are exact in float (at most 21 significant bits).
struct WorstGroup {
  float scale = 0.0f, zero = 0.0f;
};

WorstGroup draw_worst_group(int levels) {
  WorstGroup g;
  // fp16 scale bits: subnormal (1..0x3FF) a quarter of the time, else a normal up to 60000 / 3L.
  const std::uint16_t max_bits = float_to_f16_bits(20000.0f / static_cast<float>(levels));
  const bool subnormal = *rc::gen::inRange(0, 4) == 0;
  const auto bits = subnormal ? *rc::gen::inRange<std::uint16_t>(1, 0x400)
                              : *rc::gen::inRange<std::uint16_t>(0x400, static_cast<std::uint16_t>(max_bits + 1));
  g.scale = f16_bits_to_float(bits);
  // Zero: r·ŝ (|r| <= L) rounded to fp16, so a multiple of ŝ's last fp16 bit: every half step
  // ẑ + (k + 1/2)·ŝ is then exact in float.
  const float r = static_cast<float>(*rc::gen::inRange(-levels, levels + 1));
  g.zero = f16_bits_to_float(float_to_f16_bits(r * g.scale));
  return g;
}

struct IntCase {
  std::int64_t tokens = 0, head_dim = 0;
  std::vector<float> x;
  std::vector<WorstGroup> meta;  // what the quantizer must find, per metadata entry
};

IntCase draw_int_case(const QuantSpec& spec) {
  IntCase c;
  const std::int64_t unit = spec.granularity == Granularity::kPerTokenGroup ? spec.group : 4;
  c.head_dim = unit * *rc::gen::inRange<std::int64_t>(1, 5);
  c.tokens = spec.token_group() * *rc::gen::inRange<std::int64_t>(1, 3);
  c.x.assign(static_cast<std::size_t>(c.tokens * c.head_dim), 0.0f);
  const int levels = spec.levels();
  for (const std::vector<std::size_t>& members : metadata_groups(spec, c.tokens, c.head_dim)) {
    const WorstGroup g = draw_worst_group(levels);
    c.meta.push_back(g);
    // Where the minimum and the maximum sit in the group, then half steps everywhere else:
    // always the lowest and the highest (k = 0 and L - 1, next to the clamp), else random.
    const auto lo = *rc::gen::inRange<std::size_t>(0, members.size());
    const auto hi = (lo + 1 + *rc::gen::inRange<std::size_t>(0, members.size() - 1)) % members.size();
    int next_edge = 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      float& v = c.x[members[i]];
      if (i == lo) {
        v = g.zero;
      } else if (i == hi) {
        v = g.zero + static_cast<float>(levels) * g.scale;
      } else {
        const int k = next_edge < 2 ? (next_edge++ == 0 ? 0 : levels - 1) : *rc::gen::inRange(0, levels);
        v = g.zero + (static_cast<float>(k) + 0.5f) * g.scale;
      }
    }
  }
  return c;
}

TEST(QuantTightnessProps, IntBoundIsReachedAtHalfSteps) {
  for (const QuantSpec& spec : testing::all_int_specs()) {
    double least_use = 1.0;
    check_property(quant_spec_name(spec) + "/tight", kGateCases, [spec, &least_use] {
      const IntCase c = draw_int_case(spec);
      std::vector<std::uint8_t> codes(static_cast<std::size_t>(c.tokens * spec.row_bytes(c.head_dim)));
      std::vector<std::uint16_t> scales(static_cast<std::size_t>(spec.meta_count(c.tokens, c.head_dim))), zeros(scales.size());
      quantize(spec, c.x, c.tokens, c.head_dim, KvLocation{}, codes, scales, zeros);
      std::vector<float> x_hat(c.x.size());
      dequantize(spec, codes, scales, zeros, c.tokens, c.head_dim, x_hat);
      // The construction holds: the quantizer found the metadata the case was built around.
      for (std::size_t m = 0; m < scales.size(); ++m) {
        RC_ASSERT(f16_bits_to_float(scales[m]) == c.meta[m].scale);
        RC_ASSERT(f16_bits_to_float(zeros[m]) == c.meta[m].zero);
      }
      RC_ASSERT(check_int_quant_bound(spec, c.x, x_hat, scales, zeros, c.tokens, c.head_dim) == std::string());
      // Every group's worst element uses at least kTight of its bound.
      const auto groups = metadata_groups(spec, c.tokens, c.head_dim);
      for (std::size_t m = 0; m < groups.size(); ++m) {
        double use = 0.0;
        for (const std::size_t i : groups[m]) {
          const double err = std::fabs(double{c.x[i]} - double{x_hat[i]});
          use = std::max(use, err / int_quant_error_bound(c.x[i], x_hat[i], c.meta[m].scale, c.meta[m].zero));
        }
        least_use = std::min(least_use, use);
        RC_ASSERT(use >= kTight);
      }
    });
    RecordProperty(quant_spec_name(spec) + "_least_bound_use", std::to_string(least_use));
  }
}

// ---------------------------------------------------------------------------------------------
// FP8 E4M3, per-head scale s = amax / 448. The bound has two terms, each reached on its own:
//   relative   2^-4·|x|: x/s half-way between 2^E and 2^E (1 + 2^-3), the first two codes of a
//              normal binade (E = -6 .. 8): error 2^-4·2^E·s, use 1 / (1 + 2^-4 + 2^(-6-E)),
//              0.93 at E = 0 (every case has one) down to 0.49 at E = -6, where the
//              subnormal term is as large as the relative one;
//   subnormal  2^-10·s: x/s = 2^-10, half the smallest subnormal step: error 2^-10·s, use
//              1 / (1 + 2^-4) ≈ 0.94;
// and the saturation end (x at ±448·s, the head's amax) is exact.
struct Fp8Case {
  std::int64_t tokens = 0, head_dim = 0;
  std::vector<float> x;
  std::vector<bool> subnormal;  // x/s in the subnormal range
};

Fp8Case draw_fp8_case() {
  Fp8Case c;
  c.head_dim = 4 * *rc::gen::inRange<std::int64_t>(1, 9);
  c.tokens = *rc::gen::inRange<std::int64_t>(1, 9);
  const auto n = static_cast<std::size_t>(c.tokens * c.head_dim);
  // amax from float subnormals (the scale is then the smallest normal float) to 2^100.
  const float amax = std::ldexp(static_cast<float>(*rc::gen::inRange(1024, 2048)) / 1024.0f, *rc::gen::inRange(-140, 100));
  const float s = std::max(amax / 448.0f, 1.17549435e-38f);
  c.x.assign(n, 0.0f);
  c.subnormal.assign(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    const float sign = *rc::gen::inRange(0, 2) == 0 ? -1.0f : 1.0f;
    const int kind = i < 3 ? static_cast<int>(i) : *rc::gen::inRange(0, 3);
    if (kind == 0) {
      c.x[i] = sign * amax;  // saturation end, sets the scale
    } else if (kind == 1) {
      c.x[i] = sign * (s * 0x1.0p-10f);
      c.subnormal[i] = true;
    } else {
      const int e = i == 2 ? 0 : *rc::gen::inRange(-6, 9);
      c.x[i] = sign * (s * std::ldexp(1.0f + 0x1.0p-4f, e));
    }
  }
  return c;
}

TEST(QuantTightnessProps, Fp8BoundTermsAreEachReached) {
  double least_relative = 1.0, least_subnormal = 1.0;
  check_property("fp8-e4m3/tight", kGateCases, [&] {
    const Fp8Case c = draw_fp8_case();
    std::vector<std::uint8_t> codes(c.x.size());
    const float scale = quantize_fp8_e4m3(c.x, c.tokens, c.head_dim, KvLocation{}, codes);
    std::vector<float> x_hat(c.x.size());
    dequantize_fp8_e4m3(codes, scale, x_hat);
    RC_ASSERT(check_fp8_bound(c.x, x_hat, scale, c.head_dim) == std::string());
    double relative = 0.0, subnormal = 0.0;
    for (std::size_t i = 0; i < c.x.size(); ++i) {
      const double use = std::fabs(double{c.x[i]} - double{x_hat[i]}) / fp8_error_bound(c.x[i], x_hat[i], scale);
      double& term = c.subnormal[i] ? subnormal : relative;
      term = std::max(term, use);
    }
    least_relative = std::min(least_relative, relative);
    least_subnormal = std::min(least_subnormal, subnormal);
    RC_ASSERT(relative >= kTight);
    RC_ASSERT(subnormal >= kTight);
  });
  RecordProperty("fp8_least_relative_use", std::to_string(least_relative));
  RecordProperty("fp8_least_subnormal_use", std::to_string(least_subnormal));
}

// With a calibrated scale (quantize_fp8_e4m3_with_scale), values past 448·s saturate and the
// bound is not claimed; inside, the same two terms are reached.
TEST(QuantTightnessProps, Fp8WithAFixedScaleReachesTheBoundInsideItsRange) {
  const float s = 0.0371f;
  const std::vector<float> x = {448.0f * s, s * 0x1.0p-10f, s * (1.0f + 0x1.0p-4f), -s * 17.0f};
  std::vector<std::uint8_t> codes(x.size());
  quantize_fp8_e4m3_with_scale(x, 1, 4, s, KvLocation{}, codes);
  std::vector<float> x_hat(x.size());
  dequantize_fp8_e4m3(codes, s, x_hat);
  EXPECT_EQ(check_fp8_bound(x, x_hat, s, 4), "");
  for (const std::size_t i : {1u, 2u}) {
    EXPECT_GE(std::fabs(double{x[i]} - double{x_hat[i]}) / fp8_error_bound(x[i], x_hat[i], s), kTight) << i;
  }
}

}  // namespace
}  // namespace kvcheck
