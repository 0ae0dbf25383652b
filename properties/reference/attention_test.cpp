// Known-answer tests for exact attention, and GQA against plain multi-head attention.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "oracles/metrics.h"
#include "reference/attention.h"

namespace kvcheck {
namespace {

std::vector<std::int64_t> iota(std::int64_t n, std::int64_t from = 0) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

TEST(Attention, HandComputedSoftmaxAndWeightedSum) {
  // head_dim 1 (scale 1): logits 0 and ln 3 -> probabilities 1/4, 3/4 -> 0.25*4 + 0.75*8 = 7.
  MatrixRMd q(1, 1), k(2, 1), v(2, 1);
  q << 1.0F;
  k << 0.0, std::log(3.0);
  v << 4.0F, 8.0F;
  const std::vector<std::int64_t> qp = {1}, kp = {0, 1};
  std::vector<double> seen;
  const MatrixRMd out = attention_ref(q, k, v, qp, kp, {1, 1, 1, 0},
                                     [&](std::int64_t, std::int64_t, std::span<const double> p) {
                                       seen.assign(p.begin(), p.end());
                                     });
  EXPECT_NEAR(out(0, 0), 7.0, 1e-14);
  ASSERT_EQ(seen.size(), 2U);
  EXPECT_NEAR(seen[0], 0.25, 1e-15);
  EXPECT_NEAR(seen[1], 0.75, 1e-15);
}

TEST(Attention, ScaleIsOneOverSqrtHeadDim) {
  // head_dim 4, q = (1,1,1,1), k1 = (0,0,0,0), k2 = (a,a,a,a): logit 4a / 2 = 2a; a = ln(3)/2 -> 1/4, 3/4.
  const double a = std::log(3.0) / 2.0;
  MatrixRMd q = MatrixRMd::Ones(1, 4);
  MatrixRMd k(2, 4);
  k.row(0).setZero();
  k.row(1).setConstant(a);
  MatrixRMd v(2, 4);
  v.row(0).setConstant(4.0F);
  v.row(1).setConstant(8.0F);
  const std::vector<std::int64_t> qp = {1}, kp = {0, 1};
  const MatrixRMd out = attention_ref(q, k, v, qp, kp, {1, 1, 4, 0});
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(out(0, c), 7.0, 1e-14);
}

TEST(Attention, CausalMaskHidesLaterKeys) {
  MatrixRMd q(2, 1), k(2, 1), v(2, 1);
  q << 1.0F, 1.0F;
  k << 0.0F, 100.0F;
  v << 4.0F, 8.0F;
  const std::vector<std::int64_t> pos = {0, 1};
  const MatrixRMd out = attention_ref(q, k, v, pos, pos, {1, 1, 1, 0});
  EXPECT_EQ(out(0, 0), 4.0F);  // query 0 sees only key 0
  EXPECT_NEAR(out(1, 0), 8.0, 1e-6);  // query 1 is dominated by key 1
}

TEST(Attention, SlidingWindowHidesOldKeys) {
  MatrixRMd q(1, 1), k(3, 1), v(3, 1);
  q << 1.0F;
  k << 50.0F, 0.0F, 0.0F;
  v << 100.0F, 2.0F, 4.0F;
  const std::vector<std::int64_t> qp = {2}, kp = {0, 1, 2};
  // window 2: query at 2 sees keys 1 and 2 only (2 - 0 = 2 is not < 2).
  const MatrixRMd out = attention_ref(q, k, v, qp, kp, {1, 1, 1, 2});
  EXPECT_NEAR(out(0, 0), 3.0, 1e-6);
}

TEST(Attention, QueryThatSeesNoKeyIsRejected) {
  MatrixRMd q(1, 1), k(1, 1), v(1, 1);
  q << 1.0F;
  k << 1.0F;
  v << 1.0F;
  const std::vector<std::int64_t> qp = {0}, kp = {5};
  EXPECT_THROW(attention_ref(q, k, v, qp, kp, {1, 1, 1, 0}), std::invalid_argument);
}

// Plain multi-head attention written independently: per head, Eigen in double.
MatrixRMd mha_plain(const MatrixRMd& q, const MatrixRMd& k, const MatrixRMd& v, std::int64_t heads, std::int64_t d) {
  const Eigen::Index t = q.rows();
  MatrixRMd out(t, heads * d);
  for (std::int64_t h = 0; h < heads; ++h) {
    const Eigen::MatrixXd qh = q.middleCols(h * d, d).cast<double>();
    const Eigen::MatrixXd kh = k.middleCols(h * d, d).cast<double>();
    const Eigen::MatrixXd vh = v.middleCols(h * d, d).cast<double>();
    Eigen::MatrixXd s = qh * kh.transpose() / std::sqrt(static_cast<double>(d));
    for (Eigen::Index i = 0; i < t; ++i) {
      for (Eigen::Index j = i + 1; j < t; ++j) s(i, j) = -INFINITY;
      s.row(i) = (s.row(i).array() - s.row(i).maxCoeff()).exp();
      s.row(i) /= s.row(i).sum();
    }
    out.middleCols(h * d, d) = s * vh;
  }
  return out;
}

TEST(Attention, OneQueryHeadPerKvHeadEqualsPlainMultiHead) {
  std::mt19937 rng(7);
  std::normal_distribution<double> n(0.0, 1.0);
  const std::int64_t heads = 3, d = 16, t = 11;
  MatrixRMd q(t, heads * d), k(t, heads * d), v(t, heads * d);
  for (auto* m : {&q, &k, &v}) *m = m->unaryExpr([&](double) { return n(rng); }).eval();
  const std::vector<std::int64_t> pos = iota(t);
  const MatrixRMd got = attention_ref(q, k, v, pos, pos, {heads, heads, d, 0});
  const MatrixRMd want = mha_plain(q, k, v, heads, d);
  EXPECT_LT(nmse(std::span<const double>(got.data(), static_cast<std::size_t>(got.size())), std::span<const double>(want.data(), static_cast<std::size_t>(want.size()))),
            1e-13);
}

}  // namespace
}  // namespace kvcheck
