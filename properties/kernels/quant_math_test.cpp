// The scalar conversions shared by the CPU twin and the CUDA kernels, held against independent
// implementations: Eigen's fp16 (reference/tensor.h) and the table-based E4M3 of the oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/quant_math.h"
#include "oracles/quantize_ref.h"
#include "reference/tensor.h"

namespace kvcheck {
namespace {

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

TEST(QuantMath, F16ToFloatMatchesEigenOnEveryPattern) {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float a = quant::f16_to_float(static_cast<std::uint16_t>(h));
    const float b = f16_bits_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << h;
    } else {
      EXPECT_EQ(bits(a), bits(b)) << std::hex << h;
    }
  }
}

TEST(QuantMath, F16FromFloatMatchesEigenRoundToNearestEven) {
  // Every fp16 value, the midpoints between neighbours (ties), and a sweep of float patterns.
  for (std::uint32_t h = 0; h < 0x7C00; ++h) {
    for (const float sign : {1.0f, -1.0f}) {
      const float v = sign * f16_bits_to_float(static_cast<std::uint16_t>(h));
      const float next = sign * f16_bits_to_float(static_cast<std::uint16_t>(h + 1));
      for (const float x : {v, v + (next - v) / 2, std::nextafter(v + (next - v) / 2, next),
                            std::nextafter(v + (next - v) / 2, v)}) {
        ASSERT_EQ(quant::f16_from_float(x), float_to_f16_bits(x)) << x;
      }
    }
  }
  for (std::uint64_t u = 0; u <= 0xFFFFFFFFull; u += 9973) {
    float x;
    const auto u32 = static_cast<std::uint32_t>(u);
    std::memcpy(&x, &u32, 4);
    if (std::isnan(x)) continue;
    ASSERT_EQ(quant::f16_from_float(x), float_to_f16_bits(x)) << std::hexfloat << x;
  }
}

TEST(QuantMath, DirectedRoundingBracketsAndMatchesRef) {
  for (std::uint64_t u = 0; u <= 0xFFFFFFFFull; u += 7919) {
    float x;
    const auto u32 = static_cast<std::uint32_t>(u);
    std::memcpy(&x, &u32, 4);
    if (!std::isfinite(x) || std::fabs(x) > 65504.0f) continue;
    const std::uint16_t up = quant::f16_round_up(x), down = quant::f16_round_down(x);
    ASSERT_GE(quant::f16_to_float(up), x);
    ASSERT_LE(quant::f16_to_float(down), x);
    ASSERT_EQ(up, f16_round_up_ref(x));
    ASSERT_EQ(down, f16_round_down_ref(x));
    // Tight: no fp16 strictly between x and the result.
    if (quant::f16_to_float(up) != x) {
      ASSERT_LT(quant::f16_to_float(quant::f16_next_down(up)), x);
    }
    if (quant::f16_to_float(down) != x) {
      ASSERT_GT(quant::f16_to_float(quant::f16_next_up(down)), x);
    }
  }
}

TEST(QuantMath, E4M3DecodeMatchesRefOnEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const float a = quant::e4m3_to_float(code);
    const double b = e4m3_value_ref(code);
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << c;
    } else {
      EXPECT_EQ(double{a}, b) << c;
    }
  }
  EXPECT_EQ(quant::e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(quant::e4m3_to_float(0x01), 0x1.0p-9f);
  EXPECT_EQ(quant::e4m3_to_float(0x08), 0x1.0p-6f);
}

// The definition the oracle's encoder restates with a binary search: the nearest of the 127
// finite non-negative values by a scan, ties to the even code, the sign bit copied.
std::uint8_t e4m3_nearest_by_scan(float y) {
  const double a = std::fabs(double{y});
  std::uint8_t best = 0;
  for (std::uint8_t c = 1; c <= 0x7E; ++c) {
    const double d = std::fabs(e4m3_value_ref(c) - a), d_best = std::fabs(e4m3_value_ref(best) - a);
    if (d < d_best || (d == d_best && (c & 1) == 0)) best = c;
  }
  return static_cast<std::uint8_t>((std::signbit(y) ? 0x80 : 0) | best);
}

TEST(QuantMath, E4M3OracleEncodeIsTheNearestByScan) {
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = e4m3_value_ref(static_cast<std::uint8_t>(c)), hi = e4m3_value_ref(static_cast<std::uint8_t>(c + 1));
    for (const double y : {lo, (lo + hi) / 2, hi}) {
      for (const float s : {1.0f, -1.0f}) {
        for (const float x : {s * static_cast<float>(y), std::nextafter(s * static_cast<float>(y), 0.0f),
                              std::nextafter(s * static_cast<float>(y), s * 1e30f)}) {
          ASSERT_EQ(e4m3_from_float_ref(x), e4m3_nearest_by_scan(x)) << std::hexfloat << x;
        }
      }
    }
  }
  for (std::uint64_t u = 0; u <= 0xFFFFFFFFull; u += 1000003) {
    float x;
    const auto u32 = static_cast<std::uint32_t>(u);
    std::memcpy(&x, &u32, 4);
    ASSERT_EQ(e4m3_from_float_ref(x), e4m3_nearest_by_scan(x)) << std::hexfloat << x;  // NaN and inf too
  }
}

TEST(QuantMath, E4M3EncodeMatchesNearestTableEntry) {
  // Every code value, every midpoint (ties to even), and a sweep of floats in and beyond range.
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = e4m3_value_ref(static_cast<std::uint8_t>(c)), hi = e4m3_value_ref(static_cast<std::uint8_t>(c + 1));
    for (const double y : {lo, (lo + hi) / 2, hi}) {
      for (const float s : {1.0f, -1.0f}) {
        const float x = s * static_cast<float>(y);
        ASSERT_EQ(quant::e4m3_from_float(x), e4m3_from_float_ref(x)) << x;
      }
    }
  }
  for (std::uint64_t u = 0; u <= 0xFFFFFFFFull; u += 104729) {
    float x;
    const auto u32 = static_cast<std::uint32_t>(u);
    std::memcpy(&x, &u32, 4);
    if (!std::isfinite(x)) continue;
    ASSERT_EQ(quant::e4m3_from_float(x), e4m3_from_float_ref(x)) << std::hexfloat << x;
  }
  EXPECT_EQ(quant::e4m3_from_float(1e30f), 0x7E);  // saturates, never NaN
  EXPECT_EQ(quant::e4m3_from_float(-1e30f), 0xFE);
}

TEST(QuantMath, CoveringScaleIsTheSmallestThatReachesTheMaximum) {
  // x in {0.1, 0.4} at 4 bits: ẑ = fp16 below 0.1, ŝ the smallest fp16 with 15 ŝ + ẑ >= 0.4.
  const quant::QuantParams p = quant::choose_params(0.1f, 0.4f, 4);
  const float z = quant::f16_to_float(p.zero), s = quant::f16_to_float(p.scale);
  EXPECT_LE(z, 0.1f);
  EXPECT_GT(quant::f16_to_float(quant::f16_next_up(p.zero)), 0.1f);
  EXPECT_GE(15.0f * s + z, 0.4f);
  EXPECT_LT(15.0f * quant::f16_to_float(static_cast<std::uint16_t>(p.scale - 1)) + z, 0.4f);
  // Constant fp16 value: scale 0, exact.
  const quant::QuantParams c = quant::choose_params(1.5f, 1.5f, 2);
  EXPECT_EQ(c.scale, 0);
  EXPECT_EQ(quant::f16_to_float(c.zero), 1.5f);
}

}  // namespace
}  // namespace kvcheck
