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

}  // namespace
}  // namespace kvcheck
