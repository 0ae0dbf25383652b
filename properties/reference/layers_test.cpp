// Known-answer tests for RMSNorm, RoPE (plain and llama3-scaled) and SwiGLU on cases small
// enough to check by hand. Expected values were computed independently (Python, double).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "reference/layers.h"

namespace kvcheck {
namespace {

// Double computations against double constants: a few ulps at magnitude ~4.
constexpr double kTol = 1e-13;

TEST(RmsNorm, HandComputedWithEpsInsideTheRoot) {
  MatrixRMd x(1, 2);
  x << 3.0F, 4.0F;
  const std::vector<double> weight = {1.0, 2.0};
  // mean(x^2) = 12.5; + eps 0.5 = 13; out = x / sqrt(13) * w
  const MatrixRMd out = rmsnorm_ref(x, weight, 0.5);
  EXPECT_NEAR(out(0, 0), 0.8320502943378437, kTol);
  EXPECT_NEAR(out(0, 1), 2.2188007849009166, kTol);
}

TEST(RmsNorm, RowsAreIndependent) {
  MatrixRMd x(2, 2);
  x << 3.0, 4.0, 30.0, 40.0;
  const std::vector<double> weight = {1.0, 1.0};
  const MatrixRMd out = rmsnorm_ref(x, weight, 0.0);
  // Scale invariance with eps = 0: both rows normalise to the same vector.
  EXPECT_NEAR(out(0, 0), out(1, 0), kTol);
  EXPECT_NEAR(out(0, 1), out(1, 1), kTol);
  EXPECT_NEAR(out(0, 0), 3.0 / std::sqrt(12.5), kTol);
}

TEST(HeadRmsNorm, EachHeadIsNormalizedOnItsOwnWithTheSameWeight) {
  // Two tokens, two heads of d = 2, weight [1, 2], eps 0.5 (Qwen3's q_norm / k_norm).
  MatrixRMd x(2, 4);
  x << 3.0, 4.0, 1.0, 1.0,  //
      0.0, 0.0, 2.0, 0.0;
  const std::vector<double> weight = {1.0, 2.0};
  const MatrixRMd out = head_rmsnorm_ref(x, 2, 2, weight, 0.5);
  // token 0, head 0: mean(x^2) = 12.5, + 0.5 = 13: [3, 4 * 2] / sqrt(13)
  EXPECT_NEAR(out(0, 0), 0.8320502943378437, kTol);
  EXPECT_NEAR(out(0, 1), 2.2188007849009166, kTol);
  // token 0, head 1: mean 1, + 0.5 = 1.5: [1, 1 * 2] / sqrt(1.5) (a norm over the whole row, mean
  // 6.75, would give 0.371 and 0.743; weight[h*d + i] instead of weight[i] would read past it)
  EXPECT_NEAR(out(0, 2), 0.8164965809277260, kTol);
  EXPECT_NEAR(out(0, 3), 1.6329931618554521, kTol);
  // token 1, head 0: all zero stays zero; head 1: mean 2, + 0.5 = 2.5: [2 / sqrt(2.5), 0]
  EXPECT_EQ(out(1, 0), 0.0);
  EXPECT_EQ(out(1, 1), 0.0);
  EXPECT_NEAR(out(1, 2), 1.2649110640673518, kTol);
  EXPECT_EQ(out(1, 3), 0.0);
  EXPECT_THROW((void)head_rmsnorm_ref(x, 3, 2, weight, 0.5), std::invalid_argument);
}

TEST(Rope, PositionZeroIsIdentity) {
  MatrixRMd x(1, 8);
  x << 1, 2, 3, 4, 5, 6, 7, 8;
  const MatrixRMd before = x;
  const std::vector<std::int64_t> pos = {0};
  rope_ref(x, 2, 4, pos, rope_inv_freq(4, 10000.0, {}));
  EXPECT_EQ(x, before);
}

TEST(Rope, RotateHalfPairsDimensionIWithIPlusHalf) {
  // head_dim 4, theta 100: inv_freq = [1, 0.1]; position 2 rotates pair (0, 2) by 2 rad and
  // pair (1, 3) by 0.2 rad. An interleaved (GPT-J) pairing would give different numbers.
  const std::vector<double> inv_freq = rope_inv_freq(4, 100.0, {});
  ASSERT_EQ(inv_freq.size(), 2U);
  EXPECT_DOUBLE_EQ(inv_freq[0], 1.0);
  EXPECT_NEAR(inv_freq[1], 0.1, 1e-15);
  MatrixRMd x(1, 4);
  x << 1, 2, 3, 4;
  const std::vector<std::int64_t> pos = {2};
  rope_ref(x, 1, 4, pos, inv_freq);
  EXPECT_NEAR(x(0, 0), -3.1440391170241875, kTol);
  EXPECT_NEAR(x(0, 1), 1.1654558325022384, kTol);
  EXPECT_NEAR(x(0, 2), -0.33914308281574557, kTol);
  EXPECT_NEAR(x(0, 3), 4.317604972955089, kTol);
}

TEST(Rope, EveryHeadRotatesTheSame) {
  MatrixRMd x(1, 8);
  x << 1, 2, 3, 4, 1, 2, 3, 4;
  const std::vector<std::int64_t> pos = {7};
  rope_ref(x, 2, 4, pos, rope_inv_freq(4, 10000.0, {}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(x(0, i), x(0, 4 + i));
}

TEST(Rope, RotationPreservesNormAndRelativePosition) {
  // <rope(q, m), rope(k, n)> depends only on m - n.
  const std::vector<double> inv_freq = rope_inv_freq(8, 10000.0, {});
  auto dot_at = [&](std::int64_t m, std::int64_t n) {
    MatrixRMd q(1, 8), k(1, 8);
    q << 0.3F, -1.2F, 0.7F, 2.0F, -0.5F, 0.1F, 1.5F, -0.9F;
    k << 1.1F, 0.4F, -0.8F, 0.6F, 0.2F, -1.7F, 0.9F, 0.3F;
    const std::vector<std::int64_t> pm = {m}, pn = {n};
    rope_ref(q, 1, 8, pm, inv_freq);
    rope_ref(k, 1, 8, pn, inv_freq);
    return static_cast<double>(q.row(0).dot(k.row(0)));
  };
  EXPECT_NEAR(dot_at(5, 2), dot_at(103, 100), 1e-5);
  EXPECT_NEAR(dot_at(0, 0), dot_at(50, 50), 1e-5);
}

TEST(Rope, Llama3ScalingKeepsHighDividesLowAndBlendsTheBand) {
  RopeScaling s;
  s.type = RopeScaling::Type::kLlama3;
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  // theta 500000, head_dim 8: wavelengths 6.3 and 167 (kept), 4443 (in the band), 118146 (divided).
  const std::vector<double> f = rope_inv_freq(8, 500000.0, s);
  ASSERT_EQ(f.size(), 4U);
  EXPECT_NEAR(f[0], 1.0, 1e-15);
  EXPECT_NEAR(f[1], 0.03760603093086393, 1e-15);
  EXPECT_NEAR(f[2], 0.0005248461609929547, 1e-17);
  EXPECT_NEAR(f[3], 6.647869871181235e-06, 1e-19);
}

TEST(SwiGlu, HandComputed) {
  MatrixRMd gate(1, 3), up(1, 3);
  gate << 0.0F, 1.0F, -2.0F;
  up << 5.0F, 2.0F, 3.0F;
  const MatrixRMd out = swiglu_ref(gate, up);
  EXPECT_EQ(out(0, 0), 0.0F);
  EXPECT_NEAR(out(0, 1), 1.4621171572600098, kTol);  // silu(1) * 2
  EXPECT_NEAR(out(0, 2), -0.7152175321327052, kTol);  // silu(-2) * 3
}

}  // namespace
}  // namespace kvcheck
