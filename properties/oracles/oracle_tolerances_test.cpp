// The float tolerances the oracles derive from their inputs, on inputs worked out by hand. They
// are covering bounds on float rounding (worst-case sums of d terms, twice over), which no
// ordinary input comes near, so tightness is held by value: each formula is pinned to its stated
// constants, and the per-step oracle's held tolerance separates an error 1% inside it from one
// 1% outside. A tolerance made looser by any factor >= 1.01 fails here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "oracles/quant_bounds.h"
#include "oracles/retained_attention.h"
#include "oracles/step_oracle.h"

namespace kvcheck {
namespace {

constexpr double kU = 0x1.0p-24;  // float unit roundoff

TEST(OracleTolerances, IntegerBoundIsHalfAStepPlusEightUlpOfTheLargestOperand) {
  // Scale 0 (a constant group): only the slack, 8 u max(|x|, |ẑ|, |x̂|) + 2^-147.
  EXPECT_EQ(int_quant_error_bound(1.0f, 1.0f, 0.0f, 1.0f), 8.0 * kU + 0x1.0p-147);
  EXPECT_EQ(int_quant_error_bound(-3.0f, -2.0f, 0.0f, 0.5f), 8.0 * kU * 3.0 + 0x1.0p-147);
  EXPECT_EQ(int_quant_error_bound(3.0f, 2.5f, 1.0f, 0.0f), 0.5 + 8.0 * kU * 3.0 + 0x1.0p-147);
  EXPECT_EQ(int_quant_error_bound(0.0f, 0.0f, 0.0f, 0.0f), 0x1.0p-147);
}

TEST(OracleTolerances, Fp8BoundIsASixteenthOfXPlusHalfASubnormalStep) {
  // 2^-4 |x| + 2^-10 s + 4 u (|x| + |x̂|) + 2^-147.
  EXPECT_EQ(fp8_error_bound(1.0f, 1.0f, 1.0f), 0x1.0p-4 + 0x1.0p-10 + 4.0 * kU * 2.0 + 0x1.0p-147);
  EXPECT_EQ(fp8_error_bound(0.0f, 0.0f, 8.0f), 0x1.0p-10 * 8.0 + 0x1.0p-147);
  EXPECT_EQ(fp8_error_bound(-2.0f, -1.5f, 0.0f), 0x1.0p-4 * 2.0 + 4.0 * kU * 3.5 + 0x1.0p-147);
}

TEST(OracleTolerances, FusedDotToleranceIsTwiceHeadDimPlusFourUlp) {
  EXPECT_EQ(fused_dot_tolerance(16, 3.0), 2.0 * 20.0 * kU * 3.0 + 0x1.0p-147);
  EXPECT_EQ(fused_dot_tolerance(128, 1.0), 2.0 * 132.0 * kU + 0x1.0p-147);
}

// One query head, head_dim 1, scale 1; every token held exactly as stored; the engine's output
// the held attention plus `offset`.
DecodeStepCheck held_step(float q, const std::vector<float>& k, const std::vector<float>& v, double offset) {
  const std::vector<float> qs = {q};
  const double exact = retained_attention_ref(qs, k, v, 1, 1, 1.0).out[0];
  const std::vector<float> out = {static_cast<float>(exact + offset)};
  std::vector<std::int32_t> held;
  for (std::size_t j = 0; j < k.size(); ++j) held.push_back(static_cast<std::int32_t>(j));
  DecodeStepInputs in;
  in.group = 1;
  in.head_dim = 1;
  in.scale = 1.0;
  in.q = qs;
  in.engine_out = out;
  in.keys = k;
  in.values = v;
  in.held = held;
  in.held_keys = k;
  in.held_values = v;
  return check_decode_step(in);
}

TEST(OracleTolerances, StepHeldToleranceWithoutLogitRounding) {
  // Keys 0: no logit rounding (ε = 0); values ±1 with equal weight, output 0.
  // tolerance = 2 (h + d + 4) u max|v̂| = 2 · 7 · u.
  const std::vector<float> k = {0, 0}, v = {-1, 1};
  const double tol = 14.0 * kU;
  EXPECT_NEAR(held_step(1, k, v, 0).held_tolerance, tol, 1e-30);
  for (const double sign : {1.0, -1.0}) {
    EXPECT_FALSE(held_step(1, k, v, sign * 0.99 * tol).held_violated);
    EXPECT_TRUE(held_step(1, k, v, sign * 1.01 * tol).held_violated);
  }
}

TEST(OracleTolerances, StepHeldToleranceWithLogitRounding) {
  // q = 2, keys 1 and 3: Σ|q k̂| = 2 and 6, ε = 1.01 (d + 2) u · 6 = 18.18 u. Values -e^4 and 1
  // make the held output nearly 0 (e^2 : e^6 weights), so offsets of 1% of the tolerance are
  // exact in float. tolerance = (e^{2ε} - 1 + 2 (h + d + 4) u) max|v̂|.
  const float big = static_cast<float>(std::exp(4.0));
  const std::vector<float> k = {1, 3}, v = {-big, 1};
  const double eps = 1.01 * 3.0 * kU * 6.0;
  const double tol = (std::expm1(2.0 * eps) + 14.0 * kU) * big;
  EXPECT_NEAR(held_step(2, k, v, 0).held_tolerance, tol, 1e-9 * tol);
  for (const double sign : {1.0, -1.0}) {
    EXPECT_FALSE(held_step(2, k, v, sign * 0.99 * tol).held_violated);
    EXPECT_TRUE(held_step(2, k, v, sign * 1.01 * tol).held_violated);
  }
}

// scaled_dots_ref's four-keys-at-a-time loop gives each key the plain loop's bits: the same
// products summed in c order. Magnitudes spread over 2^±20 so that any other order of the adds
// (pairwise, or the keys' lanes mixed up) rounds differently; n not a multiple of four so the
// tail is held too.
TEST(ScaledDotsRef, FourKeysAtATimeGiveThePlainLoopsBits) {
  std::mt19937 rng(20261204);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  for (const std::int64_t d : {1, 3, 8, 64}) {
    for (std::int64_t n = 1; n <= 11; ++n) {
      std::vector<float> q(static_cast<std::size_t>(d)), keys(static_cast<std::size_t>(n * d));
      for (float& x : q) x = std::ldexp(mantissa(rng), exponent(rng));
      for (float& x : keys) x = std::ldexp(mantissa(rng), exponent(rng));
      const double scale = 0.125;
      std::vector<double> got(static_cast<std::size_t>(n), -1.0);
      scaled_dots_ref(q.data(), keys.data(), n, d, scale, got.data());
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (std::int64_t c = 0; c < d; ++c) s += static_cast<double>(q[c]) * static_cast<double>(keys[j * d + c]);
        const double want = scale * s;
        EXPECT_EQ(std::memcmp(&got[static_cast<std::size_t>(j)], &want, sizeof want), 0)
            << "d " << d << ", n " << n << ", key " << j << ": " << got[static_cast<std::size_t>(j)] << " vs " << want;
      }
    }
  }
}

}  // namespace
}  // namespace kvcheck
