// The Walsh–Hadamard rotation (kernels/cpu/hadamard_rotate.h) against its dense double matrix
// (oracles/hadamard_ref.h), over every value distribution of properties/support/quant_cases.h
// and every power-of-two head_dim up to 256:
//
//   matches    the float butterflies are within kRotationUlps of R·x (double);
//   orthonormal R·R^T = I (double), and unrotate(rotate(x)) returns x within twice that;
//   invariant  q·k and ‖v‖ are unchanged by the float rotation, within the same rounding.
//
//   RC_PARAMS="seed=N" build/properties/kvcheck_property_tests --gtest_filter='HadamardRotateProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/hadamard_rotate.h"
#include "oracles/hadamard_ref.h"
#include "properties/support/property_check.h"
#include "properties/support/quant_cases.h"

namespace kvcheck {
namespace {

using testing::check_property;

constexpr double kUnit = std::numeric_limits<float>::epsilon() / 2;

// The float rotation's error in 2-norm: each of the log2(d) butterfly stages rounds every sum
// once (relative u; the stages are orthogonal up to √2, which the final 1/√d undoes), and the
// multiply by the rounded 1/√d rounds twice more: (log2 d + 2)·u·‖x‖₂, plus an absolute floor for
// subnormal inputs.
double rotation_tolerance(std::int64_t d, double norm2) {
  const double stages = std::log2(static_cast<double>(d));
  return (stages + 2.0) * kUnit * norm2 + (stages + 2.0) * std::sqrt(static_cast<double>(d)) * 1.5e-45;
}

double norm2(const std::vector<float>& x, std::size_t at, std::int64_t d) {
  double s = 0.0;
  for (std::int64_t c = 0; c < d; ++c) s += static_cast<double>(x[at + c]) * x[at + c];
  return std::sqrt(s);
}

struct Rows {
  std::int64_t n = 0, d = 0;
  std::vector<float> x, signs;
};

Rows draw_rows() {
  Rows r;
  r.d = std::int64_t{1} << *rc::gen::inRange(0, 9);
  r.n = *rc::gen::inRange<std::int64_t>(1, 6);
  const auto dist = static_cast<testing::ValueDist>(*rc::gen::inRange(0, testing::kValueDistCount));
  r.x = testing::make_values(dist, r.n, r.d, *rc::gen::arbitrary<std::uint64_t>());
  if (*rc::gen::arbitrary<bool>()) r.signs = hadamard_signs(*rc::gen::arbitrary<std::uint64_t>(), r.d);
  RC_CLASSIFY(true, testing::value_dist_name(dist));
  return r;
}

TEST(HadamardRotateProps, DenseMatrixIsOrthonormal) {
  for (std::int64_t d = 1; d <= 256; d *= 2) {
    for (const std::vector<float>& signs : {std::vector<float>{}, hadamard_signs(7, d)}) {
      const std::vector<double> r = hadamard_matrix_ref(d, signs);
      double worst = 0.0;
      for (std::int64_t i = 0; i < d; ++i) {
        for (std::int64_t j = 0; j < d; ++j) {
          double s = 0.0;
          for (std::int64_t c = 0; c < d; ++c) s += r[i * d + c] * r[j * d + c];
          worst = std::max(worst, std::abs(s - (i == j ? 1.0 : 0.0)));
        }
      }
      EXPECT_LT(worst, 1e-12) << "head_dim " << d << (signs.empty() ? "" : " with signs");
    }
  }
}

TEST(HadamardRotateProps, RotationMatchesTheDenseMatrix) {
  check_property("hadamard_rotate = R·x, hadamard_unrotate = R^T·x", 2000, [] {
    const Rows r = draw_rows();
    for (const bool inverse : {false, true}) {
      std::vector<float> y = r.x;
      if (inverse) {
        hadamard_unrotate(y, r.d, r.signs);
      } else {
        hadamard_rotate(y, r.d, r.signs);
      }
      const std::vector<double> want = hadamard_rotate_ref(r.x, r.d, r.signs, inverse);
      for (std::int64_t i = 0; i < r.n; ++i) {
        const std::size_t at = static_cast<std::size_t>(i * r.d);
        double err = 0.0;
        for (std::int64_t c = 0; c < r.d; ++c) err += std::pow(y[at + c] - want[at + c], 2);
        RC_ASSERT(std::sqrt(err) <= rotation_tolerance(r.d, norm2(r.x, at, r.d)));
      }
    }
  });
}

TEST(HadamardRotateProps, RoundTripReturnsTheRow) {
  check_property("unrotate(rotate(x)) = x", 2000, [] {
    const Rows r = draw_rows();
    std::vector<float> y = r.x;
    hadamard_rotate(y, r.d, r.signs);
    hadamard_unrotate(y, r.d, r.signs);
    for (std::int64_t i = 0; i < r.n; ++i) {
      const std::size_t at = static_cast<std::size_t>(i * r.d);
      double err = 0.0;
      for (std::int64_t c = 0; c < r.d; ++c) err += std::pow(static_cast<double>(y[at + c]) - r.x[at + c], 2);
      RC_ASSERT(std::sqrt(err) <= 2.0 * rotation_tolerance(r.d, norm2(r.x, at, r.d)));
    }
  });
}

TEST(HadamardRotateProps, DotProductsAndNormsAreInvariant) {
  check_property("(R·q)·(R·k) = q·k and ‖R·v‖ = ‖v‖", 2000, [] {
    Rows r = draw_rows();
    r.n = 2;
    r.x.resize(static_cast<std::size_t>(2 * r.d), 0.5f);
    std::vector<float> y = r.x;
    hadamard_rotate(y, r.d, r.signs);
    const std::size_t d = static_cast<std::size_t>(r.d);
    double dot = 0.0, dot_rotated = 0.0;
    for (std::size_t c = 0; c < d; ++c) {
      dot += static_cast<double>(r.x[c]) * r.x[d + c];
      dot_rotated += static_cast<double>(y[c]) * y[d + c];
    }
    const double q = norm2(r.x, 0, r.d), k = norm2(r.x, d, r.d);
    // ‖Rq + e_q‖·‖e_k‖ + ‖e_q‖·‖k‖ with ‖e‖ <= tol: within 2.01·tol_q·tol_k-scaled terms.
    RC_ASSERT(std::abs(dot_rotated - dot) <= rotation_tolerance(r.d, q) * (k + rotation_tolerance(r.d, k)) +
                                                 q * rotation_tolerance(r.d, k));
    RC_ASSERT(std::abs(norm2(y, 0, r.d) - q) <= rotation_tolerance(r.d, q));
  });
}

TEST(HadamardRotateProps, SignsAreSeededPlusMinusOne) {
  const std::vector<float> a = hadamard_signs(1, 128), b = hadamard_signs(1, 128), c = hadamard_signs(2, 128);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  int minus = 0;
  for (float s : a) {
    EXPECT_TRUE(s == 1.0f || s == -1.0f);
    minus += s < 0 ? 1 : 0;
  }
  EXPECT_GT(minus, 32);  // about half
  EXPECT_LT(minus, 96);
}

TEST(HadamardRotateProps, OtherShapesAreRefused) {
  std::vector<float> x(24, 1.0f);
  EXPECT_FALSE(hadamard_fits(12));
  EXPECT_FALSE(hadamard_fits(0));
  EXPECT_TRUE(hadamard_fits(128));
  EXPECT_THROW(hadamard_rotate(x, 12, {}), std::invalid_argument);
  EXPECT_THROW(hadamard_rotate(x, 16, {}), std::invalid_argument);  // 24 is not whole rows of 16
  EXPECT_THROW(hadamard_matrix_ref(12, {}), std::invalid_argument);
  EXPECT_THROW(hadamard_matrix_ref(0, {}), std::invalid_argument);  // no rows of nothing
  EXPECT_THROW(hadamard_rotate_ref(x, 0, {}, false), std::invalid_argument);
}

}  // namespace
}  // namespace kvcheck
