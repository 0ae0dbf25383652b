// The CPU dense operations (kernels/cpu/dense_ops.h) against their definitions.
// linear_rows: every element equals row_ops::dot of its weight row and input row (plus the bias)
// bit for bit, whatever the number of rows in the batch, the output range a task owns, the
// strides, and the ISA build (portable or AVX2), and whatever dtype W is stored in (bf16, f16, f32
// at any alignment: the same bits as on the float values; ggml's Q8_0 and Q4_1 blocks: the same
// bits as on their dequantization by reference/gguf_quants.h, the gguf package's known answers).
// A wrong tile index, a dropped tail element, a missing bias, a reduction order that depended on
// the tile, an inexact widening, a block's scale taken from its neighbour or a nibble from the
// wrong half would each change some bit.
// linear_gemm, rmsnorm, rope, swiglu: within a tolerance derived from each element's own terms
// (a named number of float roundings) of the definition computed in double, outputs outside the
// task's range untouched, and linear_gemm on bf16 / f16 bytes bit for bit the float path. A wrong
// index, pairing, sign or formula is off by the size of a term.
// The CUDA twins are held against these in properties/gpu/dense_ops_gpu_test.cpp.
//   RC_PARAMS="seed=7 max_success=20000" build-cpu/properties/kvcheck_property_tests --gtest_filter='LinearRowsProps.*:DenseOpsProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/cpu/weight_dtype.h"
#include "properties/support/float_eps.h"
#include "properties/support/property_check.h"
#include "reference/gguf.h"
#include "reference/gguf_quants.h"
#include "reference/tensor.h"

namespace kvcheck {
namespace {

using testing::check_property;

struct Case {
  std::int64_t in, out, rows, w_pad, x_pad, y_pad, begin, end;
  bool bias;
  std::vector<float> w, b, x;
};

// Up to 19 outputs and 13 rows: the AVX-512 build's two octets of outputs, and its path for 8
// or more rows of 2-byte weights (each octet widened once, then tiles of 4 rows and 1-3 after).
// many: at least 8 rows and a range of at least 8 outputs, so that path always runs.
// block: in and w_pad whole blocks of that many elements (the block formats' rows).
Case gen_case(bool many = false, std::int64_t block = 1) {
  Case c;
  c.in = block > 1 ? block * *rc::gen::inRange<std::int64_t>(1, 4) : *rc::gen::inRange<std::int64_t>(1, 70);
  c.out = *rc::gen::inRange<std::int64_t>(many ? 8 : 1, 20);
  c.rows = *rc::gen::inRange<std::int64_t>(many ? 8 : 1, 14);
  c.w_pad = block * *rc::gen::inRange<std::int64_t>(0, block > 1 ? 2 : 3);
  c.x_pad = *rc::gen::inRange<std::int64_t>(0, 3);
  c.y_pad = *rc::gen::inRange<std::int64_t>(0, 3);
  c.begin = *rc::gen::inRange<std::int64_t>(0, many ? c.out - 7 : c.out);
  c.end = *rc::gen::inRange<std::int64_t>(many ? c.begin + 8 : c.begin, c.out + 1);
  c.bias = *rc::gen::arbitrary<bool>();
  // Values with full mantissas and mixed signs and scales, so that any change of summation
  // order shows up in the low bits.
  const auto value = rc::gen::map(rc::gen::inRange<int>(-1000000, 1000001),
                                  [](int v) { return static_cast<float>(v) * 1.37e-6f; });
  c.w = *rc::gen::container<std::vector<float>>(static_cast<std::size_t>(c.out * (c.in + c.w_pad)), value);
  c.x = *rc::gen::container<std::vector<float>>(static_cast<std::size_t>(c.rows * (c.in + c.x_pad)), value);
  c.b = *rc::gen::container<std::vector<float>>(static_cast<std::size_t>(c.out), value);
  return c;
}

constexpr float kUntouched = -12345.0f;

// w: the weights as `w_dtype` elements (default: c.w itself, float).
std::vector<float> run(const Case& c, LinearIsa isa, const void* w = nullptr, WeightDType w_dtype = WeightDType::kF32,
                       bool gemm = false) {
  const std::int64_t y_stride = c.out + c.y_pad;
  std::vector<float> y(static_cast<std::size_t>(c.rows * y_stride), kUntouched);
  LinearRowsArgs a;
  a.w = w != nullptr ? w : c.w.data();
  a.w_dtype = w_dtype;
  a.w_stride = c.in + c.w_pad;
  a.in = c.in;
  a.bias = c.bias ? c.b.data() : nullptr;
  a.x = c.x.data();
  a.x_stride = c.in + c.x_pad;
  a.y = y.data();
  a.y_stride = y_stride;
  a.rows = c.rows;
  a.out_begin = c.begin;
  a.out_end = c.end;
  if (gemm) linear_gemm(a);
  else linear_rows(a, isa);
  return y;
}

// W of case c as `dtype` bytes after `offset` unaligned bytes: bf16 or f16 bit patterns (any
// finite value, subnormals included; c.w becomes their float values), or f32 (c.w as it is).
std::vector<std::byte> typed_weights(Case& c, WeightDType dtype, std::size_t offset) {
  const std::size_t n = c.w.size();
  const std::size_t size = static_cast<std::size_t>(weight_row_bytes(dtype, 1));
  std::vector<std::byte> bytes(offset + n * size);
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == WeightDType::kF32) {
      std::memcpy(bytes.data() + offset + i * 4, &c.w[i], 4);
      continue;
    }
    // A finite pattern: exponent field below all-ones.
    std::uint16_t bits = *rc::gen::arbitrary<std::uint16_t>();
    const std::uint16_t exponent = dtype == WeightDType::kBF16 ? 0x7F80 : 0x7C00;
    if ((bits & exponent) == exponent) bits = static_cast<std::uint16_t>(bits & ~0x4000);
    std::memcpy(bytes.data() + offset + i * 2, &bits, 2);
    c.w[i] = dtype == WeightDType::kBF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
  }
  return bytes;
}

// W of case c (rows of whole blocks) as Q8_0 or Q4_1 blocks after `offset` unaligned bytes:
// random codes and any finite f16 scales (subnormals included); c.w becomes their
// dequantization by the reference (dequantize_ggml), which the gguf package's known answers hold.
std::vector<std::byte> block_weights(Case& c, WeightDType dtype, std::size_t offset) {
  const auto block_bytes = static_cast<std::size_t>(weight_block_bytes(dtype));
  const std::size_t blocks = c.w.size() / 32;
  std::vector<std::byte> bytes(offset + blocks * block_bytes);
  for (std::size_t b = 0; b < blocks; ++b) {
    std::byte* block = bytes.data() + offset + b * block_bytes;
    const std::vector<std::uint8_t> raw =
        *rc::gen::container<std::vector<std::uint8_t>>(block_bytes, rc::gen::arbitrary<std::uint8_t>());
    std::memcpy(block, raw.data(), block_bytes);
    // d (and Q4_1's m): finite, exponent field below all-ones.
    for (std::size_t s = 0; s < (dtype == WeightDType::kQ4_1 ? 2u : 1u); ++s) {
      if ((static_cast<std::uint8_t>(block[2 * s + 1]) & 0x7C) == 0x7C) block[2 * s + 1] &= std::byte{0xBF};
    }
    const auto type = static_cast<std::uint32_t>(dtype == WeightDType::kQ8_0 ? GgmlType::kQ8_0 : GgmlType::kQ4_1);
    dequantize_ggml(type, std::span<const std::byte>(block, block_bytes), std::span<float>(c.w.data() + b * 32, 32));
  }
  return bytes;
}

void expect_definition(const Case& c, const std::vector<float>& y) {
  const std::int64_t y_stride = c.out + c.y_pad;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    for (std::int64_t o = 0; o < y_stride; ++o) {
      const float got = y[static_cast<std::size_t>(r * y_stride + o)];
      if (o < c.begin || o >= c.end) {
        RC_ASSERT(got == kUntouched);  // outside the task's range: never written
        continue;
      }
      float want = row_ops::dot(c.w.data() + o * (c.in + c.w_pad), c.x.data() + r * (c.in + c.x_pad), c.in);
      if (c.bias) want += c.b[static_cast<std::size_t>(o)];
      RC_ASSERT(std::memcmp(&got, &want, sizeof got) == 0);
    }
  }
}

TEST(LinearRowsProps, EveryElementIsTheRowDotProduct) {
  check_property("linear_rows == row_ops::dot, portable build", 500, [] {
    const Case c = gen_case();
    expect_definition(c, run(c, LinearIsa::kPortable));
  });
}

// A wider build (AVX2 + F16C, AVX-512) gives the definition and the portable build's bits, on the
// AVX-512 build's sixteen-lane tiles of 8 and 4 outputs and the eight-lane ones after.
void wide_build_is_portable(LinearIsa isa) {
  check_property(std::string("linear_rows ") + linear_isa_name(isa) + " == portable", 500, [isa] {
    const Case c = gen_case();
    const std::vector<float> wide = run(c, isa);
    expect_definition(c, wide);
    RC_ASSERT(std::memcmp(wide.data(), run(c, LinearIsa::kPortable).data(), wide.size() * sizeof(float)) == 0);
  });
}

TEST(LinearRowsProps, Avx2BuildIsBitIdenticalToPortable) {
  if (!linear_isa_available(LinearIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2";
  wide_build_is_portable(LinearIsa::kAvx2);
}

TEST(LinearRowsProps, Avx512BuildIsBitIdenticalToPortable) {
  if (!linear_isa_available(LinearIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512 (F, VL, BW, DQ)";
  wide_build_is_portable(LinearIsa::kAvx512);
}

TEST(LinearRowsProps, RowsDoNotDependOnTheirBatch) {
  // The same row, alone and inside a larger batch at another index, gives the same bits.
  check_property("linear_rows batch invariance", 300, [] {
    Case c = gen_case();
    c.begin = 0;
    c.end = c.out;
    const std::vector<float> batch = run(c, linear_rows_isa());
    const std::int64_t r = *rc::gen::inRange<std::int64_t>(0, c.rows);
    Case solo = c;
    solo.rows = 1;
    solo.x.assign(c.x.begin() + r * (c.in + c.x_pad), c.x.begin() + (r + 1) * (c.in + c.x_pad));
    const std::vector<float> one = run(solo, linear_rows_isa());
    const std::int64_t y_stride = c.out + c.y_pad;
    RC_ASSERT(std::memcmp(one.data(), batch.data() + r * y_stride, static_cast<std::size_t>(c.out) * sizeof(float)) == 0);
  });
}

// linear_rows over `bytes` (W of case c stored as `dtype`, `offset` bytes in) gives the bits it
// gives over c.w as float, in every ISA build this CPU has.
void expect_the_float_path(const Case& c, const std::vector<std::byte>& bytes, std::size_t offset, WeightDType dtype) {
  for (const LinearIsa isa : {LinearIsa::kPortable, LinearIsa::kAvx2, LinearIsa::kAvx512}) {
    if (!linear_isa_available(isa)) continue;
    const std::vector<float> want = run(c, isa);
    const std::vector<float> got = run(c, isa, bytes.data() + offset, dtype);
    RC_ASSERT(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }
}

// W as a checkpoint stores it: bf16 or f16 bit patterns (any finite value, subnormals included),
// or f32, at a byte offset that leaves it unaligned. The kernel must give bit for bit what it gives
// on the float32 matrix of the same values (converted by the reference's own conversion), in both
// ISA builds: the widening is exact and the summation order is the float path's.
void typed_weights_give_the_float_path(bool many) {
  check_property(std::string("linear_rows on bf16/f16/f32 bytes == linear_rows on float") +
                     (many ? ", 8+ rows and outputs" : ""), 500, [many] {
    Case c = gen_case(many);
    const auto dtype = *rc::gen::element(WeightDType::kBF16, WeightDType::kF16, WeightDType::kF32);
    const auto offset = *rc::gen::inRange<std::size_t>(0, 4);
    const std::vector<std::byte> bytes = typed_weights(c, dtype, offset);
    expect_the_float_path(c, bytes, offset, dtype);
  });
}

TEST(LinearRowsProps, TypedWeightsGiveTheFloatPathBitForBit) { typed_weights_give_the_float_path(false); }

// The same where the AVX-512 build widens each octet of 2-byte rows once for all the batch's rows.
TEST(LinearRowsProps, TypedWeightsWidenedOnceGiveTheFloatPathBitForBit) { typed_weights_give_the_float_path(true); }

// Q8_0 and Q4_1 blocks read in place give bit for bit what linear_rows gives on their float32
// dequantization, in every ISA build, with one tile of rows or several (the AVX-512 build widens
// each octet of rows once for 8 or more rows) and a range of outputs anywhere in the matrix.
void block_weights_give_the_float_path(bool many) {
  check_property(std::string("linear_rows on Q8_0/Q4_1 blocks == linear_rows on their dequantization") +
                     (many ? ", 8+ rows and outputs" : ""), 300, [many] {
    Case c = gen_case(many, 32);
    const auto dtype = *rc::gen::element(WeightDType::kQ8_0, WeightDType::kQ4_1);
    const auto offset = *rc::gen::inRange<std::size_t>(0, 4);
    const std::vector<std::byte> bytes = block_weights(c, dtype, offset);
    expect_the_float_path(c, bytes, offset, dtype);
    // widen_row (the embedding lookup, linear_gemm's widening) gives the same floats.
    std::vector<float> widened(c.w.size());
    widen_row(bytes.data() + offset, dtype, static_cast<std::int64_t>(widened.size()), widened.data());
    RC_ASSERT(std::memcmp(widened.data(), c.w.data(), widened.size() * sizeof(float)) == 0);
    for (std::size_t i = 0; i < c.w.size(); i += 7) {
      const float e = widen_element(bytes.data() + offset, dtype, static_cast<std::int64_t>(i));
      RC_ASSERT(std::memcmp(&e, &c.w[i], sizeof e) == 0);
    }
  });
}

TEST(LinearRowsProps, BlockWeightsGiveTheirDequantizationBitForBit) { block_weights_give_the_float_path(false); }
TEST(LinearRowsProps, BlockWeightsWidenedOnceGiveTheirDequantizationBitForBit) {
  block_weights_give_the_float_path(true);
}

TEST(LinearRows, RejectsBlockRowsThatAreNotWholeBlocks) {
  std::vector<std::byte> w(20 * 4);
  std::vector<float> x(64, 1.0f), y(2);
  LinearRowsArgs a{w.data(), 48, 48, nullptr, x.data(), 48, y.data(), 2, 1, 0, 2, WeightDType::kQ4_1};
  EXPECT_THROW(linear_rows(a), std::invalid_argument);  // 48 is not whole blocks of 32
  a.in = a.w_stride = a.x_stride = 32;
  EXPECT_NO_THROW(linear_rows(a));
  float out[32];
  EXPECT_THROW(widen_row(w.data(), WeightDType::kQ8_0, 31, out), std::invalid_argument);
}

// Every f16 and bf16 pattern widens as the reference converts it (NaNs: to a NaN).
TEST(LinearRows, WideningMatchesTheReferenceConversionForEveryPattern) {
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    for (const WeightDType dtype : {WeightDType::kF16, WeightDType::kBF16}) {
      const float want = dtype == WeightDType::kBF16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits);
      float got = 0.0f;
      widen_row(reinterpret_cast<const std::byte*>(&bits), dtype, 1, &got);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << weight_dtype_name(dtype) << " bits " << b;
      } else {
        ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0) << weight_dtype_name(dtype) << " bits " << b;
      }
    }
  }
}

TEST(LinearRows, RejectsInconsistentShapes) {
  std::vector<float> w(8, 1.0f), x(8, 1.0f), y(1);
  LinearRowsArgs a{w.data(), 4, 8, nullptr, x.data(), 8, y.data(), 1, 1, 0, 1};  // w_stride < in
  EXPECT_THROW(linear_rows(a), std::invalid_argument);
  a.w_stride = 8;
  a.out_end = 2;  // y_stride 1 cannot hold two outputs
  EXPECT_THROW(linear_rows(a), std::invalid_argument);
  a.out_end = 1;
  EXPECT_NO_THROW(linear_rows(a));
  EXPECT_EQ(y[0], 8.0f);
}

// linear_gemm: a packed case (the GEMM's precondition).
Case gen_gemm_case() {
  Case c = gen_case();
  if (c.w_pad != 0 || c.x_pad != 0) {
    c.w_pad = c.x_pad = 0;
    c.w.resize(static_cast<std::size_t>(c.out * c.in));
    c.x.resize(static_cast<std::size_t>(c.rows * c.in));
  }
  return c;
}

// |got - want| <= tol (want exact, in double).
void expect_within(const char* what, std::size_t i, float got, double want, double tol) {
  const double diff = std::fabs(static_cast<double>(got) - want);
  if (!(diff <= tol)) {
    RC_FAIL(std::string(what) + " element " + std::to_string(i) + ": got " + std::to_string(got) + ", exact " +
            std::to_string(want) + ", |diff| " + std::to_string(diff) + " > " + std::to_string(tol));
  }
}

// The smallest normal float: a result below it may be rounded as a subnormal.
constexpr double kTiny = 0x1.0p-126;
using testing::kFloatEps;

TEST(DenseOpsProps, LinearGemmIsTheProductWithinRounding) {
  check_property("linear_gemm == W x + b within gamma_(in+1) of its terms", 300, [] {
    const Case c = gen_gemm_case();
    const std::vector<float> y = run(c, linear_rows_isa(), nullptr, WeightDType::kF32, true);
    const std::int64_t y_stride = c.out + c.y_pad;
    // Any order of in products and the bias: within gamma_(in+1) of the sum of their magnitudes.
    const double n = static_cast<double>(c.in + 1);
    const double gamma = n * kFloatEps / (1.0 - n * kFloatEps);
    for (std::int64_t r = 0; r < c.rows; ++r) {
      for (std::int64_t o = 0; o < y_stride; ++o) {
        const auto i = static_cast<std::size_t>(r * y_stride + o);
        if (o < c.begin || o >= c.end) {
          RC_ASSERT(y[i] == kUntouched);
          continue;
        }
        double exact = c.bias ? c.b[static_cast<std::size_t>(o)] : 0.0;
        double magnitude = std::fabs(exact);
        for (std::int64_t k = 0; k < c.in; ++k) {
          const double t = static_cast<double>(c.w[static_cast<std::size_t>(o * c.in + k)]) * c.x[static_cast<std::size_t>(r * c.in + k)];
          exact += t;
          magnitude += std::fabs(t);
        }
        expect_within("linear_gemm", i, y[i], exact, gamma * magnitude + kTiny);
      }
    }
  });
}

TEST(DenseOpsProps, LinearGemmOnTypedWeightsGivesTheFloatPathBitForBit) {
  check_property("linear_gemm on bf16/f16/f32 bytes == linear_gemm on float", 200, [] {
    Case c = gen_gemm_case();
    const auto dtype = *rc::gen::element(WeightDType::kBF16, WeightDType::kF16, WeightDType::kF32);
    const auto offset = *rc::gen::inRange<std::size_t>(0, 4);
    const std::vector<std::byte> bytes = typed_weights(c, dtype, offset);
    const std::vector<float> want = run(c, linear_rows_isa(), nullptr, WeightDType::kF32, true);
    const std::vector<float> got = run(c, linear_rows_isa(), bytes.data() + offset, dtype, true);
    RC_ASSERT(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  });
}

TEST(DenseOps, LinearGemmRejectsStridedOperands) {
  std::vector<float> w(8, 1.0f), x(16, 1.0f), y(1);
  LinearRowsArgs a{w.data(), 8, 8, nullptr, x.data(), 16, y.data(), 1, 1, 0, 1};  // x_stride 16 != in 8
  EXPECT_THROW(linear_gemm(a), std::invalid_argument);
  a.x_stride = 8;
  EXPECT_NO_THROW(linear_gemm(a));
  EXPECT_EQ(y[0], 8.0f);
}

// Values with full mantissas, mixed signs, |v| <= scale.
std::vector<float> gen_values(std::int64_t n, double scale) {
  const auto value = rc::gen::map(rc::gen::inRange<int>(-1000000, 1000001), [scale](int v) {
    return static_cast<float>(static_cast<double>(v) * 1e-6 * scale);
  });
  return *rc::gen::container<std::vector<float>>(static_cast<std::size_t>(n), value);
}

TEST(DenseOpsProps, RmsNormIsTheDefinitionWithinRounding) {
  check_property("rmsnorm == x / sqrt(mean x^2 + eps) * w within 4 eps", 300, [] {
    const std::int64_t width = *rc::gen::inRange<std::int64_t>(1, 300);
    const std::int64_t rows = *rc::gen::inRange<std::int64_t>(1, 6);
    const double eps = *rc::gen::element(1e-6, 1e-5, 0.5);
    const std::vector<float> x = gen_values(rows * width, 8.0);
    const std::vector<float> weight = gen_values(width, 2.0);
    std::vector<float> out(x.size());
    rmsnorm(x.data(), rows, width, weight.data(), eps, out.data());
    for (std::int64_t r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (std::int64_t i = 0; i < width; ++i) ss += std::pow(static_cast<double>(x[static_cast<std::size_t>(r * width + i)]), 2);
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(width) + eps);
      for (std::int64_t i = 0; i < width; ++i) {
        const auto k = static_cast<std::size_t>(r * width + i);
        // The inverse rounded to float once (the double sum is exact to ~width * 2^-53), then two
        // float products: 3 roundings, 4 eps with margin.
        const double want = x[k] * inv * weight[static_cast<std::size_t>(i)];
        expect_within("rmsnorm", k, out[k], want, 4.0 * kFloatEps * std::fabs(want) + kTiny);
      }
    }
  });
}

TEST(DenseOpsProps, RopeRotatesEveryPairWithinRounding) {
  check_property("rope == rotate-half by the table's cos / sin within 3 eps", 300, [] {
    const std::int64_t half = *rc::gen::inRange<std::int64_t>(1, 40);
    const std::int64_t head_dim = 2 * half;
    const std::int64_t heads = *rc::gen::inRange<std::int64_t>(1, 5);
    const std::int64_t rows = *rc::gen::inRange<std::int64_t>(1, 6);
    const std::int64_t table_rows = *rc::gen::inRange<std::int64_t>(1, 20);
    const std::vector<float> cos_table = gen_values(table_rows * half, 1.0);
    const std::vector<float> sin_table = gen_values(table_rows * half, 1.0);
    const auto positions = *rc::gen::container<std::vector<std::int32_t>>(
        static_cast<std::size_t>(rows), rc::gen::inRange<std::int32_t>(0, static_cast<std::int32_t>(table_rows)));
    const std::vector<float> x = gen_values(rows * heads * head_dim, 4.0);
    std::vector<float> y = x;
    rope(y.data(), rows, heads, head_dim, positions.data(), cos_table.data(), sin_table.data(), table_rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t p = positions[static_cast<std::size_t>(r)];
      for (std::int64_t h = 0; h < heads; ++h) {
        const auto base = static_cast<std::size_t>((r * heads + h) * head_dim);
        for (std::int64_t i = 0; i < half; ++i) {
          const auto lo = base + static_cast<std::size_t>(i), hi = lo + static_cast<std::size_t>(half);
          const double c = cos_table[static_cast<std::size_t>(p * half + i)];
          const double s = sin_table[static_cast<std::size_t>(p * half + i)];
          const double a = x[lo], b = x[hi];
          // Two products and a sum, three roundings: within 3 eps of |products|.
          expect_within("rope", lo, y[lo], a * c - b * s, 3.0 * kFloatEps * (std::fabs(a * c) + std::fabs(b * s)) + kTiny);
          expect_within("rope", hi, y[hi], b * c + a * s, 3.0 * kFloatEps * (std::fabs(b * c) + std::fabs(a * s)) + kTiny);
        }
      }
    }
  });
}

TEST(DenseOps, RopeRejectsAPositionOutsideTheTable) {
  std::vector<float> x(4, 1.0f), table(2, 0.5f);
  const std::int32_t inside = 0, outside = 1;
  EXPECT_NO_THROW(rope(x.data(), 1, 1, 4, &inside, table.data(), table.data(), 1));
  EXPECT_THROW(rope(x.data(), 1, 1, 4, &outside, table.data(), table.data(), 1), std::invalid_argument);
}

TEST(DenseOpsProps, SwiGluIsTheDefinitionWithinRounding) {
  check_property("swiglu == g / (1 + exp(-g)) * up within 6 eps", 300, [] {
    const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, 500);
    const std::vector<float> gate = gen_values(n, 30.0);
    const std::vector<float> up = gen_values(n, 4.0);
    std::vector<float> y = gate;
    swiglu(y.data(), up.data(), n);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const double g = gate[k];
      // exp within 1 ulp (2 eps relative), passed on by 1 + e, which adds a rounding, then the
      // division and the product: 5 eps relative, 6 with margin.
      const double want = g / (1.0 + std::exp(-g)) * up[k];
      expect_within("swiglu", k, y[k], want, 6.0 * kFloatEps * std::fabs(want) + kTiny);
    }
  });
}

}  // namespace
}  // namespace kvcheck
