// The tiled code layouts are bijections: over every slot of a page and every byte of a row, the
// key (and value) offsets cover [0, tokens * row_bytes) exactly once, for every format, head size
// and page size the bytes accounting produces. A mistiled index (a swapped stride, a token vector
// that ignores the page's token count) maps two bytes to one place or leaves a hole.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <vector>

#include "kernels/cpu/page_codes.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;

KvFormat format_from(int which, int group) {
  switch (which) {
    case 0: return fp32_format();
    case 1: return fp16_format();
    case 2: return fp8_e4m3_format();
    case 3: return int_format(per_token(8));
    case 4: return int_format(per_token(4));
    case 5: return int_format(per_token(2));
    case 6: return int_format(per_channel(2, group));
    default: return int_format(per_token_group(4, 8));
  }
}

void expect_bijection(const CodeTiling& t, std::int64_t tokens, bool keys) {
  const std::int64_t row = t.row_units * t.unit_bytes;
  std::vector<int> hits(static_cast<std::size_t>(tokens * row), 0);
  for (std::int64_t slot = 0; slot < tokens; ++slot) {
    for (std::int64_t b = 0; b < row; ++b) {
      const std::int64_t at = keys ? key_code_offset(t, tokens, slot, b) : value_code_offset(t, tokens, slot, b);
      RC_ASSERT(at >= 0);
      RC_ASSERT(at < tokens * row);
      ++hits[static_cast<std::size_t>(at)];
    }
  }
  for (int h : hits) RC_ASSERT(h == 1);
}

TEST(PageCodesProps, TiledOffsetsAreBijections) {
  check_property("page codes/bijection", 1000, [] {
    const int key_which = *rc::gen::inRange(0, 8);
    const int value_which = *rc::gen::inRange(0, 8);
    const int group = *rc::gen::element(16, 32);
    const std::int64_t head_dim = 8 * *rc::gen::inRange<std::int64_t>(1, 25);  // 8 .. 192
    const std::int64_t page_bytes = *rc::gen::element<std::int64_t>(4096, 8192, 16384);
    const KvTier tier{format_from(key_which, group), format_from(value_which, group)};
    std::int64_t tokens = 0;
    try {
      tokens = tokens_per_page(tier, head_dim, page_bytes);
    } catch (const std::exception&) {
      RC_DISCARD("tier does not fit this page size");
    }
    const CodeTiling kt = key_code_tiling(tier.key, head_dim);
    const CodeTiling vt = value_code_tiling(tier.value, head_dim);
    RC_ASSERT(tokens % vt.vec == 0);
    RC_ASSERT(kt.row_units % (kt.vec * kt.group) == 0);
    RC_ASSERT(vt.row_units % vt.group == 0);
    expect_bijection(kt, tokens, true);
    expect_bijection(vt, tokens, false);
  });
}

}  // namespace
}  // namespace kvcheck
