// Known-answer tests for dtypes, fp16/bf16 conversions, to_float/rows_to_float and TensorMap.
#include "properties/support/test_support.h"
#include "reference/tensor.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;

float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

bool is_f16_nan(std::uint16_t bits) { return (bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu) != 0; }
bool is_bf16_nan(std::uint16_t bits) { return (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0; }

template <typename T>
std::vector<std::byte> to_bytes(const std::vector<T>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// ---------------------------------------------------------------------------------------------
// DType table

TEST(TensorDType, SizesAndNamesOfEveryDType) {
  struct Row {
    DType dtype;
    const char* name;
    std::size_t size;
  };
  const std::vector<Row> rows = {
      {DType::kBool, "BOOL", 1}, {DType::kU8, "U8", 1},     {DType::kI8, "I8", 1},
      {DType::kF8E5M2, "F8_E5M2", 1}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kI16, "I16", 2},
      {DType::kU16, "U16", 2},   {DType::kF16, "F16", 2},   {DType::kBF16, "BF16", 2},
      {DType::kI32, "I32", 4},   {DType::kU32, "U32", 4},   {DType::kF32, "F32", 4},
      {DType::kF64, "F64", 8},   {DType::kI64, "I64", 8},   {DType::kU64, "U64", 8},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(dtype_size(row.dtype), row.size) << row.name;
    EXPECT_EQ(dtype_name(row.dtype), row.name);
    EXPECT_EQ(parse_dtype(row.name), row.dtype) << row.name;
  }
}

TEST(TensorDType, ParseRejectsUnknownNames) {
  EXPECT_EQ(parse_dtype("f32"), std::nullopt);
  EXPECT_EQ(parse_dtype("FLOAT"), std::nullopt);
  EXPECT_EQ(parse_dtype(""), std::nullopt);
  EXPECT_EQ(parse_dtype("F32 "), std::nullopt);
}

TEST(TensorView, NumelIsProductOfShapeAndOneForScalar) {
  TensorView t;
  EXPECT_EQ(t.numel(), 1);
  t.shape = {2, 3, 4};
  EXPECT_EQ(t.numel(), 24);
  t.shape = {5, 0};
  EXPECT_EQ(t.numel(), 0);
}

// ---------------------------------------------------------------------------------------------
// fp16

TEST(TensorF16, KnownFloatToBits) {
  EXPECT_EQ(float_to_f16_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(float_to_f16_bits(-2.5f), 0xC100);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16_bits(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(float_to_f16_bits(-std::numeric_limits<float>::infinity()), 0xFC00);
}

TEST(TensorF16, KnownBitsToFloat) {
  EXPECT_EQ(f16_bits_to_float(0x3C00), 1.0f);
  EXPECT_EQ(f16_bits_to_float(0xC100), -2.5f);
  EXPECT_EQ(f16_bits_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_bits_to_float(0x03FF), 1023.0f * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_bits_to_float(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_bits_to_float(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(f16_bits_to_float(0x8000)));
  EXPECT_TRUE(std::isnan(f16_bits_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_bits_to_float(0x7C01)));
  EXPECT_TRUE(std::isnan(f16_bits_to_float(0xFE00)));
}

TEST(TensorF16, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 0x3C00 (1) and 0x3C01 (1 + 2^-10): the even one wins.
  EXPECT_EQ(float_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3 * 2^-11 is halfway between 0x3C01 and 0x3C02 (1 + 2^-9).
  EXPECT_EQ(float_to_f16_bits(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3C02);
  // Just above a tie rounds up.
  EXPECT_EQ(float_to_f16_bits(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3C01);
  // Subnormal ties: 2^-25 -> 0, 3 * 2^-25 -> 2 * 2^-24.
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_f16_bits(3.0f * std::ldexp(1.0f, -25)), 0x0002);
  // 65520 is halfway between 65504 (odd mantissa) and 65536, which overflows to inf.
  EXPECT_EQ(float_to_f16_bits(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_f16_bits(1e10f), 0x7C00);
}

TEST(TensorF16, NaNStaysNaN) {
  EXPECT_TRUE(is_f16_nan(float_to_f16_bits(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_f16_nan(float_to_f16_bits(from_bits(0x7F800001u))));  // payload only in low bits
  EXPECT_TRUE(is_f16_nan(float_to_f16_bits(from_bits(0xFFC00000u))));
}

TEST(TensorF16, EveryFiniteBitPatternRoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xFFFFu; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    if (is_f16_nan(h)) continue;
    ASSERT_EQ(float_to_f16_bits(f16_bits_to_float(h)), h) << std::hex << bits;
  }
}

// ---------------------------------------------------------------------------------------------
// bf16

TEST(TensorBF16, KnownFloatToBits) {
  EXPECT_EQ(float_to_bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16_bits(-2.5f), 0xC020);
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x7F7F0000u)), 0x7F7F);  // largest finite bf16
  EXPECT_EQ(float_to_bf16_bits(std::ldexp(1.0f, -133)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16_bits(-std::numeric_limits<float>::infinity()), 0xFF80);
}

TEST(TensorBF16, KnownBitsToFloat) {
  EXPECT_EQ(bf16_bits_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(0xC020), -2.5f);
  EXPECT_EQ(bf16_bits_to_float(0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(bf16_bits_to_float(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(0x7FC0)));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(0x7F81)));
}

TEST(TensorBF16, RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 0x3F80 (1) and 0x3F81 (1 + 2^-7): the even one wins.
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F808000u)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 0x3F81 and 0x3F82.
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F818000u)), 0x3F82);
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F807FFFu)), 0x3F80);
  // The largest float rounds up to inf, as torch does.
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7F80);
}

TEST(TensorBF16, NaNStaysNaN) {
  EXPECT_TRUE(is_bf16_nan(float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN())));
  // A NaN whose payload lies only in the dropped bits must not become inf.
  EXPECT_TRUE(is_bf16_nan(float_to_bf16_bits(from_bits(0x7F800001u))));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16_bits(from_bits(0xFF80FFFFu))));
  EXPECT_EQ(float_to_bf16_bits(from_bits(0xFF80FFFFu)) & 0x8000, 0x8000);
}

TEST(TensorBF16, EveryFiniteBitPatternRoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xFFFFu; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    if (is_bf16_nan(b)) continue;
    ASSERT_EQ(float_to_bf16_bits(bf16_bits_to_float(b)), b) << std::hex << bits;
  }
}

// ---------------------------------------------------------------------------------------------
// to_float / rows_to_float

TEST(TensorToFloat, ConvertsF32F16AndBF16) {
  const std::vector<float> values = {1.0f, -2.5f, 0.5f, 65504.0f};
  for (const DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    TensorMap map;
    map.add_float("t", dtype, {2, 2}, values);
    std::vector<float> out(4);
    to_float(*map.find("t"), out, "t");
    if (dtype == DType::kBF16) {
      EXPECT_EQ(out[3], 65536.0f);  // 65504 needs 11 significant bits; bf16 keeps 8
      out[3] = 65504.0f;
    }
    EXPECT_EQ(out, values) << dtype_name(dtype);
  }
}

TEST(TensorToFloat, ReadsUnalignedBytes) {
  // A F32 tensor whose bytes start one past an aligned address.
  const std::vector<float> values = {3.0f, -7.25f};
  std::vector<std::byte> storage(1 + 8);
  std::memcpy(storage.data() + 1, values.data(), 8);
  TensorView t{DType::kF32, {2}, std::span<const std::byte>(storage).subspan(1)};
  std::vector<float> out(2);
  to_float(t, out, "unaligned");
  EXPECT_EQ(out, values);
}

TEST(TensorToFloat, RejectsOtherDTypesNamingTheTensor) {
  const std::vector<std::int32_t> ints = {1, 2};
  const std::vector<std::byte> bytes = to_bytes(ints);
  const TensorView t{DType::kI32, {2}, bytes};
  std::vector<float> out(2);
  expect_input_error([&] { to_float(t, out, "model.embed_tokens.weight"); }, {"model.embed_tokens.weight", "I32"});
}

TEST(TensorToFloat, RowsOfA2DTensor) {
  TensorMap map;
  map.add_float("w", DType::kBF16, {3, 2}, std::vector<float>{1, 2, 3, 4, 5, 6});
  const TensorView t = *map.find("w");
  std::vector<float> out(4);
  rows_to_float(t, 1, out, "w");
  EXPECT_EQ(out, (std::vector<float>{3, 4, 5, 6}));
  std::vector<float> one(2);
  rows_to_float(t, 0, one, "w");
  EXPECT_EQ(one, (std::vector<float>{1, 2}));
  std::vector<float> none;
  rows_to_float(t, 3, none, "w");  // an empty range at the end is in bounds
}

TEST(TensorToFloat, RowsOutOfRangeNameTheTensor) {
  TensorMap map;
  map.add_float("lm_head.weight", DType::kF32, {3, 2}, std::vector<float>(6, 0.0f));
  const TensorView t = *map.find("lm_head.weight");
  std::vector<float> two_rows(4);
  expect_input_error([&] { rows_to_float(t, 2, two_rows, "lm_head.weight"); }, {"lm_head.weight", "out of range"});
  expect_input_error([&] { rows_to_float(t, -1, two_rows, "lm_head.weight"); }, {"lm_head.weight", "out of range"});
  expect_input_error([&] { rows_to_float(t, 4, std::span<float>(), "lm_head.weight"); }, {"lm_head.weight"});
}

TEST(TensorToFloat, RowsRequireA2DTensor) {
  TensorMap map;
  map.add_float("norm.weight", DType::kF32, {4}, std::vector<float>(4, 1.0f));
  std::vector<float> out(4);
  expect_input_error([&] { rows_to_float(*map.find("norm.weight"), 0, out, "norm.weight"); }, {"norm.weight", "2-D"});
}

// ---------------------------------------------------------------------------------------------
// TensorMap

TEST(TensorMap, AddFindEraseAndNames) {
  TensorMap map;
  const std::vector<std::int64_t> ints = {7, -8, 9};
  map.add("b", DType::kI64, {3}, to_bytes(ints));
  map.add_float("a", DType::kF16, {}, std::vector<float>{1.0f});
  EXPECT_EQ(map.names(), (std::vector<std::string>{"a", "b"}));
  const TensorView b = *map.find("b");
  EXPECT_EQ(b.dtype, DType::kI64);
  EXPECT_EQ(b.shape, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(std::vector<std::byte>(b.bytes.begin(), b.bytes.end()), to_bytes(ints));
  const TensorView a = *map.find("a");
  ASSERT_EQ(a.bytes.size(), 2u);
  EXPECT_EQ(a.bytes[0], std::byte{0x00});  // 0x3C00, little-endian
  EXPECT_EQ(a.bytes[1], std::byte{0x3C});
  EXPECT_EQ(map.origin("a"), "<memory>");
  map.erase("b");
  map.erase("missing");
  EXPECT_FALSE(map.find("b").has_value());
  EXPECT_EQ(map.names(), (std::vector<std::string>{"a"}));
}

TEST(TensorMap, AddReplaces) {
  TensorMap map;
  map.add_float("x", DType::kF32, {1}, std::vector<float>{1.0f});
  map.add_float("x", DType::kBF16, {2}, std::vector<float>{2.0f, 3.0f});
  const TensorView x = *map.find("x");
  EXPECT_EQ(x.dtype, DType::kBF16);
  EXPECT_EQ(x.numel(), 2);
}

TEST(TensorMap, RejectsSizeMismatches) {
  TensorMap map;
  const std::vector<std::byte> five(5);
  EXPECT_THROW(map.add("x", DType::kF32, {1}, five), std::invalid_argument);
  EXPECT_THROW(map.add("x", DType::kU8, {-5}, five), std::invalid_argument);
  EXPECT_THROW(map.add_float("x", DType::kF32, {2, 2}, std::vector<float>(3)), std::invalid_argument);
  EXPECT_THROW(map.add_float("x", DType::kI32, {1}, std::vector<float>(1)), std::invalid_argument);
  map.add("empty", DType::kF32, {0, 4}, {});
  EXPECT_EQ(map.find("empty")->numel(), 0);
}

}  // namespace
}  // namespace kvcheck
