// exp_lanes (kernels/cpu/exp_lanes.h), the attention weights' exp: within one ulp of the double
// exp over the range it computes, its special values, and every lane of the vector versions
// equal to the scalar function bit for bit (the prefill kernel's builds depend on it).
//   RC_PARAMS="seed=7 max_success=2000" build/properties/kvcheck_property_tests --gtest_filter='ExpLanes*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/exp_lanes.h"
#include "kernels/cpu/lanes.h"
#include "properties/support/property_check.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace kvcheck {
namespace {

using exp_lanes::exp_weight;
using testing::check_property;

// |got - exp(x)| in units of the float spacing at exp(x).
double ulps(float x, float got) {
  const double exact = std::exp(static_cast<double>(x));
  const auto rounded = static_cast<float>(exact);
  const double ulp = static_cast<double>(std::nextafter(rounded, std::numeric_limits<float>::infinity())) - rounded;
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

TEST(ExpLanesProps, WithinOneUlpOfExpOverItsRange) {
  check_property("exp_weight(x) within 1 ulp of exp(x) for x in [-87.3, 88]", 2000, [] {
    const auto bits = *rc::gen::inRange<std::uint32_t>(0, 1u << 24);
    const float x = -87.3f + (87.3f + 88.0f) * static_cast<float>(bits) / static_cast<float>(1u << 24);
    const float got = exp_weight(x);
    RC_ASSERT(ulps(x, got) <= 1.0);
  });
  // Attention weights live in [-30, 0]: a dense sweep there.
  double worst = 0.0;
  for (int i = 0; i <= 300000; ++i) {
    const float x = -30.0f * static_cast<float>(i) / 300000.0f;
    worst = std::max(worst, ulps(x, exp_weight(x)));
  }
  EXPECT_LE(worst, 1.0);
}

TEST(ExpLanesProps, SpecialValues) {
  EXPECT_EQ(exp_weight(0.0f), 1.0f);
  EXPECT_EQ(exp_weight(-0.0f), 1.0f);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(exp_weight(-std::numeric_limits<float>::infinity())), 0u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(exp_weight(-100.0f)), 0u);  // below FLT_MIN: +0
  EXPECT_GT(exp_weight(exp_lanes::kLow), 0.0f);                        // the smallest computed: normal
  EXPECT_GE(exp_weight(exp_lanes::kLow), std::numeric_limits<float>::min());
  EXPECT_EQ(exp_weight(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp_weight(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(exp_weight(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_NEAR(exp_weight(1.0f), 2.7182817f, 3e-7f);
  EXPECT_NEAR(exp_weight(-1.0f), 0.36787944f, 5e-8f);
}

TEST(ExpLanesProps, EveryLaneIsTheScalarFunction) {
  check_property("exp_of over 8 and 4 lanes == exp_weight per lane, bit for bit", 2000, [] {
    lanes::Lanes x8;
    lanes::Lanes4 x4;
    for (int l = 0; l < 8; ++l) {
      // Anything: finite values across the range and beyond it, infinities, NaN.
      const auto pick = *rc::gen::inRange(0, 20);
      float v = *rc::gen::map(rc::gen::inRange(-2000000, 2000000), [](int i) { return static_cast<float>(i) * 1e-4f; });
      if (pick == 0) v = -std::numeric_limits<float>::infinity();
      if (pick == 1) v = std::numeric_limits<float>::quiet_NaN();
      if (pick == 2) v = exp_lanes::kLow;
      x8[l] = v;
      if (l < 4) x4[l] = v;
    }
    const lanes::Lanes e8 = exp_lanes::exp_of<lanes::Lanes, lanes::I32Lanes>(x8);
    const lanes::Lanes4 e4 = exp_lanes::exp_of<lanes::Lanes4, lanes::I32Lanes4>(x4);
    for (int l = 0; l < 8; ++l) {
      const std::uint32_t want = std::bit_cast<std::uint32_t>(exp_weight(x8[l]));
      RC_ASSERT(std::bit_cast<std::uint32_t>(static_cast<float>(e8[l])) == want);
      if (l < 4) RC_ASSERT(std::bit_cast<std::uint32_t>(static_cast<float>(e4[l])) == want);
    }
  });
}

#if defined(__x86_64__)
// exp_of16 (the AVX-512 builds' sixteen lanes, masks instead of exp_of's vector compares) on the
// same kind of inputs, one call in a function compiled as kernels/ compiles it: for AVX-512F, whose
// FMA GCC would otherwise contract a multiply and an add into (this file is built without
// kernels/' -ffp-contract=off; it once changed the last bit of exp(-64.0343)).
__attribute__((target("avx512f"), optimize("fp-contract=off"), noinline)) void exp16(const float* x, float* y) {
  exp_lanes::ExpLanes16 v;
  std::memcpy(&v, x, sizeof v);
  const exp_lanes::ExpLanes16 e = exp_lanes::exp_of16(v);
  std::memcpy(y, &e, sizeof e);
}

TEST(ExpLanesProps, SixteenLanesAreTheScalarFunction) {
  if (!linear_isa_available(LinearIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512 (F, VL, BW, DQ)";
  check_property("exp_of16 == exp_weight per lane, bit for bit", 2000, [] {
    float x[16], y[16];
    for (float& v : x) {
      const auto pick = *rc::gen::inRange(0, 20);
      v = *rc::gen::map(rc::gen::inRange(-2000000, 2000000), [](int i) { return static_cast<float>(i) * 1e-4f; });
      if (pick == 0) v = -std::numeric_limits<float>::infinity();
      if (pick == 1) v = std::numeric_limits<float>::quiet_NaN();
      if (pick == 2) v = exp_lanes::kLow;
      if (pick == 3) v = std::numeric_limits<float>::infinity();
      if (pick == 4) v = exp_lanes::kHigh;
    }
    exp16(x, y);
    for (int l = 0; l < 16; ++l) {
      const float want = exp_weight(x[l]);
      if (std::bit_cast<std::uint32_t>(y[l]) != std::bit_cast<std::uint32_t>(want)) {
        RC_FAIL("lane " + std::to_string(l) + ": exp_of16(" + std::to_string(x[l]) + ") = " + std::to_string(y[l]) +
                ", exp_weight " + std::to_string(want));
      }
    }
  });
}
#endif

}  // namespace
}  // namespace kvcheck
