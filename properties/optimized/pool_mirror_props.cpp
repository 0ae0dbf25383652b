// Page stamps (optimized/page_pool.h) and the copy kept by them (optimized/pool_mirror.h):
//
//   AChangedPageTakesANewStamp
//       random sequences of every mutator of the pool (format, release, copy_page, put, add_score,
//       kill, move, store_codes, store_key_group_meta, a write through bytes()) on pools of four
//       tier sets (LeanKV's per-token INT pair, fp16 keys with Quest's key ranges, KIVI's
//       per-channel keys, FP8): after each, every page whose live mask or any byte but its scores
//       changed has a new stamp, and a score alone (add_score) leaves it;
//   AMirrorReadsAsThePool
//       a copy that takes, at random points, the pages PoolMirror::stale names for a random subset
//       of pages holds, for every page of that subset, the pool's live mask and bytes but scores;
//   TwoPoolsNeverShareAStamp
//       (so a mirror that meets a new pool where an old one was still copies every page).
//
// Reproduce a failure with the seed it prints:
//   RC_PARAMS="seed=N" build/properties/kvcheck_property_tests --gtest_filter='PoolMirrorProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

#include "optimized/page_pool.h"
#include "optimized/pool_mirror.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;

PagePoolConfig pool_config(int set) {
  PagePoolConfig c;
  c.pages = 5;
  c.page_bytes = 4096;
  c.head_dim = 64;
  c.poison = true;
  switch (set) {
    case 0: break;  // leankv_default_tiers: K8V4, K4V2 per token
    case 1: c.tiers = {KvTier{fp16_format(), fp16_format(), true}}; break;
    case 2:
      c.head_dim = 16;
      c.tiers = {KvTier{int_format(per_channel(2, 16)), int_format(per_token(2))}};
      break;
    default: c.tiers = {KvTier{fp8_e4m3_format(), fp8_e4m3_format()}}; break;
  }
  return c;
}

// What decode attention may read of a page: its live mask, then its bytes with the scores blanked.
std::vector<std::uint8_t> read_view(const PagePool& pool, PageId id) {
  const std::span<const std::uint64_t> mask = pool.live_mask(id);
  const std::span<const std::byte> bytes = pool.bytes(id);
  std::vector<std::uint8_t> v(mask.size_bytes() + bytes.size());
  std::memcpy(v.data(), mask.data(), mask.size_bytes());
  std::memcpy(v.data() + mask.size_bytes(), bytes.data(), bytes.size());
  if (!pool.owner(id).free()) {
    const PageSegment& s = pool.layout(pool.owner(id).tier).scores;
    std::memset(v.data() + mask.size_bytes() + s.offset, 0, static_cast<std::size_t>(s.bytes));
  }
  return v;
}

std::vector<PageId> owned(const PagePool& pool) {
  std::vector<PageId> ids;
  for (PageId id = 0; id < pool.pages(); ++id) {
    if (!pool.owner(id).free()) ids.push_back(id);
  }
  return ids;
}

// One random mutation of the pool; returns what it did, and sets score_only when it changed a
// score alone.
std::string mutate(PagePool& pool, bool& score_only) {
  score_only = false;
  const std::vector<PageId> pages = owned(pool);
  const int op = pages.empty() ? 0 : *rc::gen::inRange(0, 10);
  const PageId id = pages.empty() ? 0 : *rc::gen::elementOf(pages);
  const int tier = pool.owner(id).tier;
  const std::int64_t slots = pages.empty() ? 0 : pool.tokens_per_page(tier);
  const std::int64_t slot = slots > 0 ? *rc::gen::inRange<std::int64_t>(0, slots) : 0;
  switch (op) {
    case 0: {
      const PageId to = *rc::gen::inRange<PageId>(0, static_cast<PageId>(pool.pages()));
      pool.format(to, PageOwner{HeadKey{0, 0, 0}, *rc::gen::inRange(0, pool.tiers())});
      return fmt::format("format {}", to);
    }
    case 1: pool.release(id); return fmt::format("release {}", id);
    case 2: {
      std::vector<PageId> same;
      for (PageId p : pages) {
        if (p != id && pool.owner(p).tier == tier) same.push_back(p);
      }
      if (same.empty()) return "nothing";
      const PageId to = *rc::gen::elementOf(same);
      pool.copy_page(id, to);
      return fmt::format("copy_page {} -> {}", id, to);
    }
    case 3: {
      pool.put(id, slot, TokenPayload{*rc::gen::inRange(0, 50), static_cast<float>(*rc::gen::inRange(0, 100)) / 7.0f});
      return fmt::format("put {} slot {}", id, slot);
    }
    case 4: {
      if (!pool.live(id, slot)) return "nothing";
      pool.add_score(id, slot, 0.25f);
      score_only = true;
      return fmt::format("add_score {} slot {}", id, slot);
    }
    case 5: pool.kill(id, slot); return fmt::format("kill {} slot {}", id, slot);
    case 6: {
      if (!pool.live(id, slot) || pool.key_group_tokens(tier) > 1) return "nothing";
      std::vector<std::pair<PageId, std::int64_t>> dead;
      for (PageId p : pages) {
        if (pool.owner(p).tier != tier) continue;
        for (std::int64_t s = 0; s < slots; ++s) {
          if (!pool.live(p, s)) dead.emplace_back(p, s);
        }
      }
      if (dead.empty()) return "nothing";
      const auto [to, to_slot] = *rc::gen::elementOf(dead);
      pool.move(id, slot, to, to_slot);
      return fmt::format("move {} slot {} -> {} slot {}", id, slot, to, to_slot);
    }
    case 7: {
      PagePool::SlotCodes c = pool.empty_codes(tier);
      for (auto* v : {&c.key, &c.key_meta, &c.value, &c.value_meta}) {
        for (auto& b : *v) b = static_cast<std::uint8_t>(*rc::gen::inRange(0, 256));
      }
      if (pool.config().tiers[static_cast<std::size_t>(tier)].key.dtype == KvDType::kFp16) {
        // fp16 keys: finite values (a key range widens by them).
        for (std::size_t i = 1; i < c.key.size(); i += 2) c.key[i] &= 0x3B;
      }
      pool.store_codes(id, slot, c);
      return fmt::format("store_codes {} slot {}", id, slot);
    }
    case 8: {
      const std::int64_t g = pool.key_group_tokens(tier);
      if (g <= 1) return "nothing";
      std::vector<std::uint8_t> meta(static_cast<std::size_t>(pool.config().head_dim * 4),
                                     static_cast<std::uint8_t>(*rc::gen::inRange(0, 256)));
      pool.store_key_group_meta(id, slot / g * g, meta);
      return fmt::format("store_key_group_meta {} slot {}", id, slot / g * g);
    }
    default: {
      const std::span<std::byte> b = pool.bytes(id);
      const auto at = static_cast<std::size_t>(*rc::gen::inRange<std::int64_t>(0, static_cast<std::int64_t>(b.size())));
      b[at] = static_cast<std::byte>(*rc::gen::inRange(0, 256));
      return fmt::format("bytes() of {} at {}", id, at);
    }
  }
}

TEST(PoolMirrorProps, AChangedPageTakesANewStamp) {
  long changes = 0, score_only = 0;
  check_property("a changed page takes a new stamp", 200, [&] {
    PagePool pool(pool_config(*rc::gen::inRange(0, 4)));
    const int ops = *rc::gen::inRange(1, 60);
    for (int i = 0; i < ops; ++i) {
      std::vector<std::vector<std::uint8_t>> before;
      std::vector<std::uint64_t> stamps;
      for (PageId id = 0; id < pool.pages(); ++id) {
        before.push_back(read_view(pool, id));
        stamps.push_back(pool.version(id));
      }
      bool score = false;
      const std::string what = mutate(pool, score);
      for (PageId id = 0; id < pool.pages(); ++id) {
        const auto k = static_cast<std::size_t>(id);
        const bool changed = read_view(pool, id) != before[k];
        if (changed && pool.version(id) == stamps[k]) {
          RC_FAIL(fmt::format("op {} ({}): page {} changed and kept its stamp {}", i, what, id, stamps[k]));
        }
        changes += changed;
      }
      if (score) {
        ++score_only;
        for (PageId id = 0; id < pool.pages(); ++id) {
          RC_ASSERT(pool.version(id) == stamps[static_cast<std::size_t>(id)]);
        }
      }
    }
  });
  EXPECT_GT(changes, 0);
  EXPECT_GT(score_only, 0);
}

TEST(PoolMirrorProps, AMirrorReadsAsThePool) {
  long taken = 0, skipped = 0;
  check_property("a mirror reads as the pool", 200, [&] {
    PagePool pool(pool_config(*rc::gen::inRange(0, 4)));
    PoolMirror mirror;
    std::vector<std::vector<std::uint8_t>> copy(static_cast<std::size_t>(pool.pages()));
    const int ops = *rc::gen::inRange(1, 60);
    std::vector<PageId> stale;
    for (int i = 0; i < ops; ++i) {
      bool score = false;
      const std::string what = mutate(pool, score);
      if (*rc::gen::inRange(0, 3) > 0) continue;
      std::vector<PageId> asked;
      for (PageId id = 0; id < pool.pages(); ++id) {
        if (*rc::gen::arbitrary<bool>()) asked.push_back(id);
      }
      stale.clear();
      mirror.stale(pool, asked, stale);
      for (PageId id : stale) copy[static_cast<std::size_t>(id)] = read_view(pool, id);
      skipped += static_cast<long>(asked.size() - stale.size());
      taken += static_cast<long>(stale.size());
      for (PageId id : asked) {
        if (copy[static_cast<std::size_t>(id)] != read_view(pool, id)) {
          RC_FAIL(fmt::format("after op {} ({}): the copy of page {} is not the pool's", i, what, id));
        }
      }
    }
  });
  EXPECT_GT(taken, 0);
  EXPECT_GT(skipped, 0);  // a page that did not change is not copied again
}

TEST(PoolMirrorProps, TwoPoolsNeverShareAStamp) {
  PagePool a(pool_config(0)), b(pool_config(0));
  for (PageId i = 0; i < a.pages(); ++i) {
    EXPECT_NE(a.version(i), 0U);
    for (PageId j = 0; j < b.pages(); ++j) EXPECT_NE(a.version(i), b.version(j)) << i << " " << j;
  }
  a.format(0, PageOwner{HeadKey{0, 0, 0}, 0});
  b.format(0, PageOwner{HeadKey{0, 0, 0}, 0});
  EXPECT_NE(a.version(0), b.version(0));
}

}  // namespace
}  // namespace kvcheck
