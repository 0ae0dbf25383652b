// A unified page stores each slot's codes in LeanKV's tiled layouts: rows round-trip, sit at the
// offsets of kernels/cpu/page_codes.h, survive moves, and killing (poisoning) one slot leaves the
// codes of every other slot intact.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/page_codes.h"
#include "kernels/quant_math.h"
#include "optimized/page_pool.h"
#include "reference/errors.h"

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

// A key-range tier (Quest) stores each page's per-channel fp16 key min and max in the page: empty
// when formatted, after every store exactly the min and max of the keys stored so far, widened on
// the page a slot moves to and never narrowed by a kill; 256 bytes more at head_dim 64, at the
// end of the key metadata segment, inside the page.
TEST(PagePool, KeyRangeTierStoresTheRunningMinAndMaxOfItsKeys) {
  PagePoolConfig c = small_pool();
  c.tiers = {KvTier{fp16_format(), fp16_format(), true}};
  PagePool pool(c);
  const PageLayout& l = pool.layout(0);
  const PageLayout plain = page_layout(KvTier{fp16_format(), fp16_format()}, 64, c.page_bytes);
  EXPECT_EQ(l.key_range.bytes, 2 * 64 * 2);
  EXPECT_EQ(l.key_range.offset + l.key_range.bytes, l.key_meta.offset + l.key_meta.bytes);
  EXPECT_LE(l.tokens, plain.tokens);
  EXPECT_LE(l.used_bytes, c.page_bytes);
  EXPECT_EQ(plain.key_range.bytes, 0);
  const auto range = [&](PageId id) {
    std::vector<float> lo(64), hi(64);
    read_page_key_range(l, pool.bytes(id).data(), lo, hi);
    return std::pair{lo, hi};
  };
  pool.format(0, PageOwner{HeadKey{0, 0, 0}, 0});
  pool.format(1, PageOwner{HeadKey{0, 0, 0}, 0});
  EXPECT_EQ(range(0).first, std::vector<float>(64, std::numeric_limits<float>::infinity()));
  EXPECT_EQ(range(0).second, std::vector<float>(64, -std::numeric_limits<float>::infinity()));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  std::vector<float> lo(64, std::numeric_limits<float>::infinity()), hi(64, -lo[0]);
  std::vector<std::vector<std::uint8_t>> keys;
  for (std::int64_t s = 0; s < 5; ++s) {
    PagePool::SlotCodes codes = pool.empty_codes(0);
    for (std::size_t ch = 0; ch < 64; ++ch) {
      const std::uint16_t h = quant::f16_from_float(u(rng));
      std::memcpy(codes.key.data() + 2 * ch, &h, 2);
      lo[ch] = std::min(lo[ch], quant::f16_to_float(h));
      hi[ch] = std::max(hi[ch], quant::f16_to_float(h));
    }
    pool.put(0, s, TokenPayload{static_cast<std::int32_t>(s), 0.0f});
    pool.store_codes(0, s, codes);
    EXPECT_EQ(range(0).first, lo) << "after slot " << s;
    EXPECT_EQ(range(0).second, hi) << "after slot " << s;
    keys.push_back(codes.key);
  }
  pool.kill(0, 2);
  EXPECT_EQ(range(0), std::pair(lo, hi));
  pool.move(0, 4, 1, 0);
  EXPECT_EQ(range(0), std::pair(lo, hi));
  for (std::size_t ch = 0; ch < 64; ++ch) {
    std::uint16_t h = 0;
    std::memcpy(&h, keys[4].data() + 2 * ch, 2);
    EXPECT_EQ(range(1).first[ch], quant::f16_to_float(h));
    EXPECT_EQ(range(1).second[ch], quant::f16_to_float(h));
  }
  pool.release(0);
  pool.format(0, PageOwner{HeadKey{0, 0, 1}, 0});
  EXPECT_EQ(range(0).first, std::vector<float>(64, std::numeric_limits<float>::infinity()));
  // Only fp16 keys carry a range.
  EXPECT_THROW(page_layout(KvTier{int_format(per_token(4)), fp16_format(), true}, 64, c.page_bytes), InputError);
}

// A slot outside [0, tokens_per_page) is refused by the slot writes and code reads, never
// written or read past the page. (payload() and live() do not check their slot.)
TEST(PagePool, SlotsOutsideThePageAreOutOfRange) {
  PagePool pool(small_pool());
  pool.format(0, PageOwner{HeadKey{0, 0, 0}, 0});
  const std::int64_t tokens = pool.tokens_per_page(0);
  for (const std::int64_t slot : {std::int64_t{-1}, tokens, tokens + 5}) {
    EXPECT_THROW(pool.put(0, slot, TokenPayload{1, 0.5f}), std::out_of_range) << slot;
    EXPECT_THROW((void)pool.load_codes(0, slot), std::out_of_range) << slot;
    EXPECT_THROW(pool.store_codes(0, slot, pool.empty_codes(0)), std::out_of_range) << slot;
  }
  EXPECT_NO_THROW(pool.put(0, tokens - 1, TokenPayload{1, 0.5f}));
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
