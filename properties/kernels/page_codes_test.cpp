// Tiled key and value code offsets in a unified page: hand-computed positions.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/page_codes.h"

namespace kvcheck {
namespace {

TEST(PageCodes, TilingsOfTheLeanKvFormats) {
  // int8 keys, d = 128: 16-byte vectors, 4 threads per key -> [2][tokens][4][16].
  const CodeTiling k8 = key_code_tiling(int_format(per_token(8)), 128);
  EXPECT_EQ(k8.unit_bytes, 1);
  EXPECT_EQ(k8.row_units, 128);
  EXPECT_EQ(k8.vec, 16);
  EXPECT_EQ(k8.group, 4);
  // int4 values, d = 128: 64 bytes per token; 4 tokens per vector, 8 bytes per group.
  const CodeTiling v4 = value_code_tiling(int_format(per_token(4)), 128);
  EXPECT_EQ(v4.row_units, 64);
  EXPECT_EQ(v4.vec, 4);
  EXPECT_EQ(v4.group, 8);
  // fp16: the unit is one element; 8 elements per 16-byte key vector, 2 tokens per value vector.
  const CodeTiling k16 = key_code_tiling(fp16_format(), 32);
  EXPECT_EQ(k16.unit_bytes, 2);
  EXPECT_EQ(k16.vec, 8);
  EXPECT_EQ(value_code_tiling(fp16_format(), 32).vec, 2);
  // int2 keys, d = 32: an 8-byte row, one vector of 8, one thread.
  const CodeTiling k2 = key_code_tiling(int_format(per_token(2)), 32);
  EXPECT_EQ(k2.vec, 8);
  EXPECT_EQ(k2.group, 1);
}

TEST(PageCodes, HandComputedOffsets) {
  const CodeTiling k8 = key_code_tiling(int_format(per_token(8)), 128);
  // Byte 70 of slot 3 in a 76-token page: chunk 1, thread 0, element 6 -> ((1*76+3)*4+0)*16+6.
  EXPECT_EQ(key_code_offset(k8, 76, 3, 70), 5062);
  // The first 64 bytes of consecutive tokens are contiguous 64-byte runs (one warp's load).
  EXPECT_EQ(key_code_offset(k8, 76, 0, 63), 63);
  EXPECT_EQ(key_code_offset(k8, 76, 1, 0), 64);
  const CodeTiling v4 = value_code_tiling(int_format(per_token(4)), 128);
  // Byte 13 of slot 6: byte group 1, member 5; token vector 1, lane 2 -> ((1*19+1)*8+5)*4+2.
  EXPECT_EQ(value_code_offset(v4, 76, 6, 13), 662);
  // Four consecutive tokens of one byte are adjacent.
  EXPECT_EQ(value_code_offset(v4, 76, 5, 13) + 1, value_code_offset(v4, 76, 6, 13));
  // fp16 keys keep an element's two bytes together: byte 5 = element 2, high byte.
  const CodeTiling k16 = key_code_tiling(fp16_format(), 32);
  EXPECT_EQ(key_code_offset(k16, 30, 2, 5), 133);
}

TEST(PageCodes, RowsRoundTripThroughTheSegment) {
  const CodeTiling t = value_code_tiling(int_format(per_token(2)), 64);
  const std::int64_t tokens = 8;
  std::vector<std::uint8_t> segment(static_cast<std::size_t>(tokens * t.row_units), 0);
  std::vector<std::uint8_t> row(static_cast<std::size_t>(t.row_units));
  for (std::size_t b = 0; b < row.size(); ++b) row[b] = static_cast<std::uint8_t>(b * 7 + 1);
  store_value_row(segment, t, tokens, 5, row);
  std::vector<std::uint8_t> back(row.size());
  load_value_row(segment, t, tokens, 5, back);
  EXPECT_EQ(back, row);
  load_value_row(segment, t, tokens, 4, back);  // another slot is untouched
  EXPECT_EQ(back, std::vector<std::uint8_t>(row.size(), 0));
  EXPECT_THROW(store_value_row(segment, t, tokens, 8, row), std::logic_error);
}

// store/load move a row in runs (one per key chunk, one per value unit) placed at each run's first
// byte: every byte of every stored format, at every head_dim and slot, must still land where the
// per-byte definition (key_code_offset / value_code_offset) says, and nothing else be written.
TEST(PageCodes, EveryByteOfARowLandsAtItsDefinedOffset) {
  std::vector<KvFormat> formats = {fp32_format(), fp16_format(), fp8_e4m3_format()};
  for (const int bits : {2, 4, 8}) {
    formats.push_back(int_format(per_token(bits)));
    formats.push_back(int_format(per_channel(bits)));
    formats.push_back(int_format(per_token_group(bits, 32)));
  }
  const std::int64_t tokens = 16;
  for (const KvFormat& f : formats) {
    for (const std::int64_t d : {32, 64, 96, 128}) {
      for (const bool keys : {true, false}) {
        const CodeTiling t = keys ? key_code_tiling(f, d) : value_code_tiling(f, d);
        const auto row_bytes = static_cast<std::size_t>(t.row_units * t.unit_bytes);
        for (const std::int64_t slot : {std::int64_t{0}, std::int64_t{5}, tokens - 1}) {
          SCOPED_TRACE(testing::Message() << (keys ? "keys" : "values") << " of " << kv_format_name(f) << ", d " << d
                                          << ", slot " << slot);
          std::vector<std::uint8_t> segment(static_cast<std::size_t>(tokens) * row_bytes, 0);
          std::vector<std::uint8_t> row(row_bytes);
          for (std::size_t b = 0; b < row.size(); ++b) row[b] = static_cast<std::uint8_t>(1 + b % 251);
          (keys ? store_key_row : store_value_row)(segment, t, tokens, slot, row);
          std::vector<std::uint8_t> expected(segment.size(), 0);
          for (std::size_t b = 0; b < row.size(); ++b) {
            const std::int64_t at = keys ? key_code_offset(t, tokens, slot, static_cast<std::int64_t>(b))
                                         : value_code_offset(t, tokens, slot, static_cast<std::int64_t>(b));
            expected[static_cast<std::size_t>(at)] = row[b];
          }
          ASSERT_EQ(segment, expected);
          std::vector<std::uint8_t> back(row_bytes, 0);
          (keys ? load_key_row : load_value_row)(segment, t, tokens, slot, back);
          ASSERT_EQ(back, row);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvcheck
