// Known answers and the defined edge cases of the KV quantizers (kernels/cpu/quantize.h,
// fp8_e4m3.h, bitpack.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "kernels/cpu/bitpack.h"
#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/quantize.h"
#include "kernels/quant_math.h"
#include "oracles/quant_bounds.h"
#include "properties/support/test_support.h"
#include "reference/tensor.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;

struct Out {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint16_t> scales, zeros;
  std::vector<float> x_hat;
};

Out roundtrip(const QuantSpec& spec, const std::vector<float>& x, std::int64_t tokens, std::int64_t d,
              const KvLocation& at = {}) {
  Out o;
  o.codes.resize(static_cast<std::size_t>(tokens * spec.row_bytes(d)));
  o.scales.resize(static_cast<std::size_t>(spec.meta_count(tokens, d)));
  o.zeros.resize(o.scales.size());
  quantize(spec, x, tokens, d, at, o.codes, o.scales, o.zeros);
  o.x_hat.resize(x.size());
  dequantize(spec, o.codes, o.scales, o.zeros, tokens, d, o.x_hat);
  return o;
}

TEST(Bitpack, FirstCodeInTheLowBits) {
  const std::vector<std::uint8_t> codes2 = {0, 1, 2, 3, 3, 2, 1, 0};
  std::vector<std::uint8_t> p2(2);
  pack_codes(2, codes2, p2);
  EXPECT_EQ(p2[0], 0xE4);  // 0b11'10'01'00
  EXPECT_EQ(p2[1], 0x1B);  // 0b00'01'10'11
  const std::vector<std::uint8_t> codes4 = {0x3, 0xA};
  std::vector<std::uint8_t> p4(1);
  pack_codes(4, codes4, p4);
  EXPECT_EQ(p4[0], 0xA3);
}

TEST(Quantize, KnownAnswerTwoBitsPerToken) {
  const Out o = roundtrip(per_token(2), {0.0f, 1.0f, 2.0f, 3.0f}, 1, 4);
  EXPECT_EQ(o.scales[0], 0x3C00);  // 1.0
  EXPECT_EQ(o.zeros[0], 0x0000);   // 0.0
  EXPECT_EQ(o.codes[0], 0xE4);     // codes 0, 1, 2, 3
  EXPECT_EQ(o.x_hat, (std::vector<float>{0.0f, 1.0f, 2.0f, 3.0f}));
}

// A token's scale and zero come from its own row: a next row far outside its range changes
// nothing, whatever the head size (the vectorised statistics take eight floats at a time, so
// sizes 8k + 7 end just before a partial lane).
TEST(Quantize, EachTokensMetadataComesFromItsOwnRow) {
  for (const std::int64_t d : {16, 23, 31, 39, 47, 61}) {
    std::vector<float> x(static_cast<std::size_t>(2 * d), 1000.0f);  // row 1: far above row 0
    // Row 0 in [1, 2] (no zero: a zero extreme is recomputed in order).
    for (std::int64_t c = 0; c < d; ++c) x[static_cast<std::size_t>(c)] = 1.0f + static_cast<float>(c) / static_cast<float>(d - 1);
    const Out both = roundtrip(per_token(8), x, 2, d);
    const Out alone = roundtrip(per_token(8), std::vector<float>(x.begin(), x.begin() + d), 1, d);
    EXPECT_EQ(both.scales[0], alone.scales[0]) << "head_dim " << d;
    EXPECT_EQ(both.zeros[0], alone.zeros[0]) << "head_dim " << d;
    EXPECT_EQ(both.zeros[0], 0x3C00) << "head_dim " << d;                      // row 0's minimum, 1
    EXPECT_LT(quant::f16_to_float(both.scales[0]), 1.0f / 200) << "head_dim " << d;  // about 1/255
  }
}

// quantize_block reads only the rows it is given: the row after them in the caller's buffer, here
// beyond the fp16 range that the residual is checked against, neither counts nor is refused.
TEST(Quantize, BlockReadsOnlyItsOwnRows) {
  const std::int64_t d = 8, tokens = 20;  // one group of 16 tokens, 4 in the fp16 residual
  std::vector<float> buffer(static_cast<std::size_t>((tokens + 1) * d), 1e6f);
  for (std::int64_t i = 0; i < tokens * d; ++i) buffer[static_cast<std::size_t>(i)] = 0.25f * static_cast<float>(i % 7);
  const std::span<const float> rows = std::span<const float>(buffer).first(static_cast<std::size_t>(tokens * d));
  QuantizedBlock b;
  ASSERT_NO_THROW(b = quantize_block(per_channel(2, 16), rows, tokens, d, {}));
  EXPECT_EQ(b.tokens, 16);
  ASSERT_EQ(b.residual_tokens, 4);
  const std::vector<float> back = dequantize_block(b);
  for (std::int64_t i = 16 * d; i < tokens * d; ++i) {
    EXPECT_EQ(back[static_cast<std::size_t>(i)], rows[static_cast<std::size_t>(i)]) << i;  // k/4 is exact in fp16
  }
}

TEST(Quantize, KnownAnswerPerChannel) {
  // Two channels over G = 16 tokens: channel 0 runs 0..15, channel 1 is constant 2.
  std::vector<float> x;
  for (int t = 0; t < 16; ++t) x.insert(x.end(), {static_cast<float>(t), 2.0f, 0.0f, 0.0f});
  const Out o = roundtrip(per_channel(4, 16), x, 16, 4);
  ASSERT_EQ(o.scales.size(), 4u);
  EXPECT_EQ(f16_bits_to_float(o.scales[0]), 1.0f);  // 15 / 15
  EXPECT_EQ(o.scales[1], 0);                         // constant channel
  EXPECT_EQ(f16_bits_to_float(o.zeros[1]), 2.0f);
  EXPECT_EQ(o.x_hat, x);
}

TEST(Quantize, ConstantVectorsAreExactWithScaleZero) {
  for (const float c : {0.0f, -0.0f, 1.5f, -3.25f, 65504.0f, -65504.0f, 0x1.0p-24f}) {
    for (const QuantSpec& spec : {per_token(2), per_token(8), per_channel(4, 16), per_token_group(2, 4)}) {
      const std::vector<float> x(16 * 8, c);
      const Out o = roundtrip(spec, x, 16, 8);
      for (const std::uint16_t s : o.scales) EXPECT_EQ(s, 0) << quant_spec_name(spec) << " " << c;
      EXPECT_EQ(o.x_hat, x) << quant_spec_name(spec) << " " << c;  // -0 may come back as +0: equal
    }
  }
}

TEST(Quantize, ConstantNonFp16ValueStaysWithinTheBound) {
  const std::vector<float> x(8, 0.1f);  // 0.1 is no fp16 number: ẑ < 0.1, ŝ > 0
  const Out o = roundtrip(per_token(4), x, 1, 8);
  EXPECT_GT(o.scales[0], 0);
  EXPECT_EQ(check_int_quant_bound(per_token(4), x, o.x_hat, o.scales, o.zeros, 1, 8), "");
}

TEST(Quantize, SubnormalsAndSignedZeros) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<float> x = {0.0f, -0.0f, tiny, -tiny, 0x1.0p-24f, -0x1.0p-20f, 1e-30f, 0.0f};
  for (const QuantSpec& spec : {per_token(8), per_token(4), per_token(2)}) {
    const Out o = roundtrip(spec, x, 1, 8);
    EXPECT_EQ(check_int_quant_bound(spec, x, o.x_hat, o.scales, o.zeros, 1, 8), "") << quant_spec_name(spec);
  }
}

TEST(Quantize, NanAndInfAreRejectedNamingLayerHeadToken) {
  std::vector<float> x(4 * 8, 1.0f);
  const KvLocation at{3, 1, 100, "key"};
  for (const QuantSpec& spec : {per_token(4), per_channel(2, 16), per_token_group(8, 4)}) {
    x.assign(16 * 8, 1.0f);
    x[2 * 8 + 5] = std::numeric_limits<float>::quiet_NaN();
    expect_input_error([&] { roundtrip(spec, x, 16, 8, at); },
                       {"key", "layer 3", "head 1", "token 102", "channel 5", "NaN"});
    x[2 * 8 + 5] = -std::numeric_limits<float>::infinity();
    expect_input_error([&] { roundtrip(spec, x, 16, 8, at); }, {"layer 3", "head 1", "token 102", "-inf"});
  }
  std::vector<std::uint8_t> codes(x.size());
  x[7] = std::numeric_limits<float>::infinity();
  expect_input_error([&] { quantize_fp8_e4m3(x, 16, 8, at, codes); }, {"fp8-e4m3", "layer 3", "token 100", "channel 7", "+inf"});
}

TEST(Quantize, MagnitudesBeyondFp16AreAcceptedExactlyWhenTheMetadataExists) {
  std::vector<float> x(2 * 8, 1.0f);
  // Above +65504: the zero (1.0) and the scale ((70000 - 1) / 255) are fp16 numbers. Stored.
  x[12] = 70000.0f;
  Out o = roundtrip(per_token(8), x, 2, 8);
  EXPECT_EQ(check_int_quant_bound(per_token(8), x, o.x_hat, o.scales, o.zeros, 2, 8), "");
  // The dequantized values re-quantize (LeanKV demotes tokens from their dequantized values).
  const Out again = roundtrip(per_token(4), o.x_hat, 2, 8);
  EXPECT_EQ(check_int_quant_bound(per_token(4), o.x_hat, again.x_hat, again.scales, again.zeros, 2, 8), "");
  // Below -65504 the zero point (the minimum rounded down to fp16) does not exist.
  x[12] = -70000.0f;
  expect_input_error([&] { roundtrip(per_token(8), x, 2, 8, {0, 2, 0, "value"}); },
                     {"value", "head 2", "token 1", "channel 4", "-70000", "zero point"});
  x[12] = -65504.0f;  // the limit itself is fine
  o = roundtrip(per_token(8), x, 2, 8);
  EXPECT_EQ(check_int_quant_bound(per_token(8), x, o.x_hat, o.scales, o.zeros, 2, 8), "");
  // A range wider than 65504 x (2^b - 1) has no fp16 scale: 2 bits cover at most 196512.
  x[12] = 300000.0f;
  expect_input_error([&] { roundtrip(per_token(2), x, 2, 8, {4, 0, 10, "key"}); },
                     {"layer 4", "tokens 11..11", "channels 0..7", "scale beyond the fp16 range"});
  std::vector<float> wide(16 * 4, 0.0f);
  wide[5 * 4 + 2] = 300000.0f;
  expect_input_error([&] { roundtrip(per_channel(2, 16), wide, 16, 4); }, {"tokens 0..15", "channels 2..2", "scale beyond"});
  // FP8 has an fp32 scale: no such limit.
  x[12] = 1e30f;
  std::vector<std::uint8_t> codes(x.size());
  std::vector<float> x_hat(x.size());
  const float scale = quantize_fp8_e4m3(x, 2, 8, {}, codes);
  dequantize_fp8_e4m3(codes, scale, x_hat);
  EXPECT_EQ(check_fp8_bound(x, x_hat, scale, 8), "");
  // The fp16 residual holds only fp16 values.
  std::vector<float> r(17 * 4, 1.0f);
  r[16 * 4 + 1] = 70000.0f;
  expect_input_error([&] { quantize_block(per_channel(2, 16), r, 17, 4, {}); }, {"fp16 residual", "token 16", "70000"});
}

TEST(Quantize, ConfigurationErrorsAreClear) {
  expect_input_error([] { validate(per_token(2), 6); }, {"int2/token", "head_dim", "6 is not a multiple of 4"});
  expect_input_error([] { validate(per_token(4), 7); }, {"head_dim", "7 is not a multiple of 2"});
  expect_input_error([] { validate(per_token(3), 8); }, {"bits", "must be 8, 4 or 2"});
  expect_input_error([] { validate(per_channel(2, 24), 8); }, {"group", "16, 32 or 128"});
  expect_input_error([] { validate(per_token_group(4, 6), 8); }, {"group", "divide head_dim 8"});
  std::vector<std::uint8_t> codes(3);
  std::vector<std::uint16_t> meta(1);
  expect_input_error([&] { quantize(per_token(2), std::vector<float>(6), 1, 6, {}, codes, meta, meta); },
                     {"not a multiple of 4"});
}

TEST(Quantize, PartialGroupStaysInTheFp16Residual) {
  const std::int64_t tokens = 16 * 2 + 5, d = 8;
  std::vector<float> x(static_cast<std::size_t>(tokens * d));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f) * 3.0f;
  const QuantizedBlock b = quantize_block(per_channel(2, 16), x, tokens, d, {});
  EXPECT_EQ(b.tokens, 32);
  EXPECT_EQ(b.residual_tokens, 5);
  ASSERT_EQ(b.residual.size(), 5u * d);
  for (std::size_t i = 0; i < b.residual.size(); ++i) EXPECT_EQ(b.residual[i], float_to_f16_bits(x[32 * d + i]));
  const std::vector<float> back = dequantize_block(b);
  ASSERT_EQ(back.size(), x.size());
  for (std::size_t i = 32 * d; i < x.size(); ++i) EXPECT_EQ(back[i], f16_bits_to_float(float_to_f16_bits(x[i])));
  // Per token: no residual.
  EXPECT_EQ(quantize_block(per_token(4), x, tokens, d, {}).residual_tokens, 0);
  // A NaN in the residual is rejected too.
  x.back() = std::numeric_limits<float>::quiet_NaN();
  expect_input_error([&] { quantize_block(per_channel(2, 16), x, tokens, d, {1, 0, 0, "key"}); },
                     {"fp16 residual", "token 36", "NaN"});
}

TEST(Quantize, Fp16InputPathEqualsFloatPath) {
  std::vector<std::uint16_t> h(4 * 16);
  std::vector<float> f(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) f[i] = f16_bits_to_float(h[i] = float_to_f16_bits(std::cos(static_cast<float>(i))));
  const QuantSpec spec = per_token(4);
  const Out o = roundtrip(spec, f, 4, 16);
  std::vector<std::uint8_t> codes(o.codes.size());
  std::vector<std::uint16_t> scales(o.scales.size()), zeros(o.zeros.size());
  quantize_f16(spec, h, 4, 16, {}, codes, scales, zeros);
  EXPECT_EQ(codes, o.codes);
  EXPECT_EQ(scales, o.scales);
  EXPECT_EQ(zeros, o.zeros);
}

TEST(Fp8E4M3, KnownAnswers) {
  const std::vector<float> x = {448.0f, -448.0f, 1.0f, 0.0f, -0.0f, 0x1.0p-9f, 17.0f, 0.0f};
  std::vector<std::uint8_t> codes(x.size());
  const float scale = quantize_fp8_e4m3(x, 1, 8, {}, codes);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(codes, (std::vector<std::uint8_t>{0x7E, 0xFE, 0x38, 0x00, 0x80, 0x01, 0x58, 0x00}));  // 17 -> 16 (tie to even)
  std::vector<float> out(x.size());
  dequantize_fp8_e4m3(codes, scale, out);
  EXPECT_EQ(out[6], 16.0f);
  // All zeros: scale is the smallest normal float, codes are zero.
  const std::vector<float> zeros(8, 0.0f);
  EXPECT_EQ(quantize_fp8_e4m3(zeros, 1, 8, {}, codes), std::numeric_limits<float>::min());
}

TEST(Fp8E4M3, StaticScaleSaturates) {
  const std::vector<float> x = {1000.0f, -1000.0f};
  std::vector<std::uint8_t> codes(2);
  quantize_fp8_e4m3_with_scale(x, 1, 2, 1.0f, {}, codes);
  EXPECT_EQ(codes, (std::vector<std::uint8_t>{0x7E, 0xFE}));
  expect_input_error([&] { quantize_fp8_e4m3_with_scale(x, 1, 2, 0.0f, {}, codes); }, {"scale"});
}

}  // namespace
}  // namespace kvcheck
