// A unified page stores each slot's codes in LeanKV's tiled layouts: rows round-trip, sit at the
// offsets of kernels/cpu/page_codes.h, survive moves, and killing (poisoning) one slot leaves the
// codes of every other slot intact.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/page_codes.h"
#include "optimized/page_pool.h"

namespace kvcheck {
namespace {

PagePoolConfig small_pool() {
  PagePoolConfig c;
  c.pages = 3;
  c.page_bytes = 4096;
  c.head_dim = 64;
  c.poison = true;
  return c;
}

// Codes that name their slot and byte, so any misplacement shows.
PagePool::SlotCodes codes_for(const PagePool& pool, int tier, std::int64_t slot) {
  PagePool::SlotCodes c = pool.empty_codes(tier);
  auto fill = [slot](std::vector<std::uint8_t>& v, int salt) {
    for (std::size_t b = 0; b < v.size(); ++b) v[b] = static_cast<std::uint8_t>((slot * 31 + static_cast<std::int64_t>(b) * 7 + salt) % 251);
  };
  fill(c.key, 1);
  fill(c.key_meta, 2);
  fill(c.value, 3);
  fill(c.value_meta, 4);
  return c;
}

TEST(PagePool, CodesAreStoredInTheTiledLayouts) {
  PagePool pool(small_pool());
  const int tier = 1;  // K4V2
  pool.format(0, PageOwner{HeadKey{0, 0, 0}, tier});
  const std::int64_t tokens = pool.tokens_per_page(tier);
  for (std::int64_t s = 0; s < tokens; ++s) {
    pool.put(0, s, TokenPayload{static_cast<std::int32_t>(s), 1.0f});
    pool.store_codes(0, s, codes_for(pool, tier, s));
  }
  // Byte 5 of slot 3's value row is where page_codes.h says.
  const PageLayout& l = pool.layout(tier);
  const CodeTiling vt = value_code_tiling(pool.config().tiers[1].value, 64);
  const auto page = pool.bytes(0);
  const std::int64_t at = l.value_codes.offset + value_code_offset(vt, tokens, 3, 5);
  EXPECT_EQ(std::to_integer<int>(page[static_cast<std::size_t>(at)]), codes_for(pool, tier, 3).value[5]);
  // Killing every even slot poisons exactly those.
  for (std::int64_t s = 0; s < tokens; s += 2) pool.kill(0, s);
  for (std::int64_t s = 0; s < tokens; ++s) {
    const PagePool::SlotCodes back = pool.load_codes(0, s);
    if (s % 2 == 1) {
      EXPECT_EQ(back, codes_for(pool, tier, s)) << "slot " << s;
      EXPECT_EQ(pool.payload(0, s).position, s);
    } else {
      EXPECT_EQ(back.key, std::vector<std::uint8_t>(back.key.size(), 0xFF)) << "slot " << s;
      EXPECT_EQ(pool.payload(0, s).position, -1);
    }
  }
}

TEST(PagePool, MoveCarriesCodesToTheOtherPage) {
  PagePool pool(small_pool());
  pool.format(1, PageOwner{HeadKey{0, 0, 0}, 0});
  pool.format(2, PageOwner{HeadKey{0, 0, 0}, 0});
  pool.put(1, 4, TokenPayload{9, 0.5f});
  pool.store_codes(1, 4, codes_for(pool, 0, 4));
  pool.move(1, 4, 2, 0);
  EXPECT_FALSE(pool.live(1, 4));
  EXPECT_TRUE(pool.live(2, 0));
  EXPECT_EQ(pool.load_codes(2, 0), codes_for(pool, 0, 4));
  EXPECT_EQ(pool.payload(2, 0), (TokenPayload{9, 0.5f}));
}

TEST(PagePool, WrongRowSizeIsALogicError) {
  PagePool pool(small_pool());
  pool.format(0, PageOwner{HeadKey{0, 0, 0}, 0});
  PagePool::SlotCodes c = pool.empty_codes(0);
  c.key.pop_back();
  EXPECT_THROW(pool.store_codes(0, 0, c), std::logic_error);
}

}  // namespace
}  // namespace kvcheck
