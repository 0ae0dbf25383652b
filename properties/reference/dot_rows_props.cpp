// reference/dot_rows.h, the reference's one product kernel, against its contract written out
// element by element here (eight fused lanes over k mod 8, the fixed tree, the tail in order), bit
// for bit: random shapes of 0..37 rows and outputs (every tile and remainder of every ISA build),
// lengths 0..150 (multiples of 8 and not), strides wider than the rows, store and accumulate; and
// every ISA this CPU runs against the portable build. Reproduce a failure with
// RC_PARAMS="seed=<seed printed by RapidCheck>".
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "reference/dot_rows.h"

namespace kvcheck {
namespace {

// The contract of one element, independent of the kernel's lanes and tiles.
double defined_dot(const double* x, const double* w, std::int64_t in) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const std::int64_t body = in / 8 * 8;
  for (std::int64_t k = 0; k < body; ++k) lane[k % 8] = std::fma(x[k], w[k], lane[k % 8]);
  double tail = 0.0;
  for (std::int64_t k = body; k < in; ++k) tail = std::fma(x[k], w[k], tail);
  return (((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]))) + tail;
}

struct Case {
  std::int64_t rows, outs, in, x_pad, w_pad, y_pad;
  bool accumulate;
  std::uint64_t seed;
};

rc::Gen<Case> gen_case() {
  return rc::gen::apply(
      [](std::int64_t rows, std::int64_t outs, std::int64_t in, std::int64_t xp, std::int64_t wp, std::int64_t yp,
         bool acc, std::uint64_t seed) { return Case{rows, outs, in, xp, wp, yp, acc, seed}; },
      rc::gen::inRange<std::int64_t>(0, 38), rc::gen::inRange<std::int64_t>(0, 38), rc::gen::inRange<std::int64_t>(0, 151),
      rc::gen::inRange<std::int64_t>(0, 4), rc::gen::inRange<std::int64_t>(0, 4), rc::gen::inRange<std::int64_t>(0, 4),
      rc::gen::arbitrary<bool>(), rc::gen::arbitrary<std::uint64_t>());
}

struct Operands {
  std::vector<double> x, w, y;
  DotRowsArgs args;
};

// Values over several magnitudes and both signs, so that a reordered sum rounds differently.
Operands make_operands(const Case& c) {
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  const auto draw = [&] { return std::ldexp(mantissa(rng), exponent(rng)); };
  Operands o;
  o.args.x_stride = c.in + c.x_pad;
  o.args.w_stride = c.in + c.w_pad;
  o.args.y_stride = c.outs + c.y_pad;
  o.x.resize(static_cast<std::size_t>(c.rows * o.args.x_stride));
  o.w.resize(static_cast<std::size_t>(c.outs * o.args.w_stride));
  o.y.resize(static_cast<std::size_t>(c.rows * o.args.y_stride));
  for (double& v : o.x) v = draw();
  for (double& v : o.w) v = draw();
  for (double& v : o.y) v = draw();
  o.args.x = o.x.data();
  o.args.w = o.w.data();
  o.args.y = o.y.data();
  o.args.rows = c.rows;
  o.args.outs = c.outs;
  o.args.in = c.in;
  o.args.accumulate = c.accumulate;
  return o;
}

std::uint64_t bits(double v) { return std::bit_cast<std::uint64_t>(v); }

RC_GTEST_PROP(DotRowsProps, EveryElementIsItsDefinedSumAndNothingElseIsWritten, ()) {
  const Case c = *gen_case();
  Operands o = make_operands(c);
  const std::vector<double> before = o.y;
  dot_rows(o.args);
  for (std::int64_t r = 0; r < c.rows; ++r) {
    for (std::int64_t j = 0; j < o.args.y_stride; ++j) {
      const std::size_t at = static_cast<std::size_t>(r * o.args.y_stride + j);
      if (j >= c.outs) {
        RC_ASSERT(bits(o.y[at]) == bits(before[at]));  // the stride's padding
        continue;
      }
      const double sum = defined_dot(o.x.data() + r * o.args.x_stride, o.w.data() + j * o.args.w_stride, c.in);
      const double want = c.accumulate ? before[at] + sum : sum;
      if (bits(o.y[at]) != bits(want)) {
        RC_FAIL(fmt::format("y[{}][{}] = {:a}, its defined sum {:a} ({} rows, {} outputs, in {}, {})", r, j, o.y[at],
                            want, c.rows, c.outs, c.in, c.accumulate ? "accumulate" : "store"));
      }
    }
  }
}

RC_GTEST_PROP(DotRowsProps, EveryIsaGivesThePortableBits, ()) {
  const Case c = *gen_case();
  Operands portable = make_operands(c);
  dot_rows(portable.args, DotIsa::kPortable);
  for (const DotIsa isa : {DotIsa::kAvx2, DotIsa::kAvx512}) {
    if (!dot_isa_available(isa)) continue;
    Operands o = make_operands(c);
    dot_rows(o.args, isa);
    for (std::size_t i = 0; i < o.y.size(); ++i) {
      RC_ASSERT(bits(o.y[i]) == bits(portable.y[i]));
    }
  }
}

TEST(DotRows, TheWidestIsaIsUsedAndNamed) {
  // The default build runs the widest ISA it has (capped by KVCHECK_ISA in the environment).
  EXPECT_TRUE(dot_isa_available(dot_rows_isa()));
  EXPECT_TRUE(dot_isa_available(DotIsa::kPortable));
  EXPECT_STREQ(dot_isa_name(DotIsa::kAvx512), "avx512");
}

TEST(DotRows, MatrixFormTakesBlocksWithoutCopies) {
  // A block of a wider matrix (outer stride > cols) goes through as is: y's block written, the
  // rest of y untouched.
  MatrixRMd x = MatrixRMd::Random(6, 20), w = MatrixRMd::Random(5, 20), y = MatrixRMd::Zero(6, 9);
  dot_rows(x.block(1, 2, 4, 13), w.block(0, 2, 3, 13), y.block(1, 4, 4, 3));
  for (Eigen::Index r = 0; r < 6; ++r) {
    for (Eigen::Index c = 0; c < 9; ++c) {
      const bool inside = r >= 1 && r < 5 && c >= 4 && c < 7;
      const double want = inside ? defined_dot(&x(r, 2), &w(c - 4, 2), 13) : 0.0;
      EXPECT_EQ(bits(y(r, c)), bits(want)) << r << "," << c;
    }
  }
}

TEST(DotRows, InconsistentShapesThrow) {
  MatrixRMd x(3, 8), w(4, 7), y(3, 4);
  EXPECT_THROW(dot_rows(x, w, y), std::invalid_argument);
  DotRowsArgs a;
  a.rows = 1;
  a.outs = 1;
  a.in = 8;
  a.x_stride = 7;  // shorter than the row
  a.w_stride = 8;
  a.y_stride = 1;
  std::vector<double> buf(16);
  a.x = a.w = buf.data();
  a.y = buf.data();
  EXPECT_THROW(dot_rows(a), std::invalid_argument);
}

}  // namespace
}  // namespace kvcheck
