// The page pool and the page manager on hand-computed cases: LeanKV's figure 5 scaled by two
// (16-token prompt, 4 tokens per high page, 8 per low page), decode steps, finish, statistics,
// poison.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "optimized/pool_exhausted.h"
#include "optimized/unified_page_manager.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

// head_dim 16, 224-byte pages: K8V4 holds 4 tokens, K4V2 holds 8.
PageManagerConfig figure5_config(CompactionMode mode) {
  PageManagerConfig c;
  c.pool.pages = 10;
  c.pool.page_bytes = 224;
  c.pool.head_dim = 16;
  c.pool.poison = true;
  c.layers = 1;
  c.kv_heads = 2;
  c.max_seq_len = 16;
  c.compaction.mode = mode;
  c.compaction.threads = 2;
  c.compaction.min_parallel = 1;
  return c;
}

// A decode step's decision for one head: evict or demote live token i (walk order), or flush.
StepDecision evict(std::size_t i) {
  StepDecision d;
  d.evict = i;
  return d;
}
StepDecision demote(std::size_t i) {
  StepDecision d;
  d.demote = i;
  return d;
}
StepDecision flush_all() {
  StepDecision d;
  d.flush = true;
  return d;
}

std::vector<PageId> side(const PageTable& t, int tier) {
  std::vector<PageId> ids;
  for (std::int64_t i = 0; i < t.count(tier); ++i) ids.push_back(t.at(tier, i));
  return ids;
}

TEST(PagePool, LeanKvTiersAndPoison) {
  PagePoolConfig c = figure5_config(CompactionMode::kParallel).pool;
  PagePool pool(c);
  EXPECT_EQ(pool.tokens_per_page(kHighTier), 4);
  EXPECT_EQ(pool.tokens_per_page(kLowTier), 8);
  pool.format(3, PageOwner{HeadKey{0, 0, 0}, kLowTier});
  pool.put(3, 1, TokenPayload{42, 1.5f});
  EXPECT_TRUE(pool.live(3, 1));
  EXPECT_EQ(pool.first_dead_slot(3), 0);
  EXPECT_EQ(pool.payload(3, 1), (TokenPayload{42, 1.5f}));
  EXPECT_EQ(pool.payload(3, 0).position, -1);  // poisoned dead slot
  EXPECT_TRUE(std::isnan(pool.payload(3, 0).score));
  pool.kill(3, 1);
  EXPECT_EQ(pool.payload(3, 1).position, -1);
  EXPECT_EQ(pool.live_count(3), 0);
  pool.release(3);
  EXPECT_TRUE(pool.owner(3).free());
}

TEST(PagePool, RejectsPerChannelValues) {
  PagePoolConfig c;
  c.pages = 4;
  c.tiers = {KvTier{int_format(per_token(2)), int_format(per_channel(2, 32))},
             KvTier{int_format(per_token(2)), int_format(per_token(2))}};
  EXPECT_THROW(PagePool{c}, InputError);
}

// Per-channel key tiers (KIVI): a group's metadata is written once for its G slots, survives a
// kill of one of them (the others still need it), and such slots never move.
TEST(PagePool, PerChannelKeyGroupsKeepTheirMetadata) {
  PagePoolConfig c;
  c.pages = 2;
  c.page_bytes = 4096;
  c.head_dim = 16;
  c.poison = true;
  c.tiers = {KvTier{int_format(per_channel(2, 16)), int_format(per_token(2))}};
  PagePool pool(c);
  ASSERT_EQ(pool.key_group_tokens(0), 16);
  ASSERT_EQ(pool.tokens_per_page(0) % 16, 0);
  pool.format(0, PageOwner{HeadKey{0, 0, 0}, 0});
  pool.format(1, PageOwner{HeadKey{0, 0, 0}, 0});
  std::vector<std::uint8_t> meta(16 * 4);
  for (std::size_t i = 0; i < meta.size(); ++i) meta[i] = static_cast<std::uint8_t>(i);
  pool.store_key_group_meta(0, 16, meta);
  EXPECT_THROW(pool.store_key_group_meta(0, 8, meta), std::logic_error);  // not a group start
  EXPECT_EQ(pool.empty_codes(0).key_meta.size(), 0U);                     // nothing per slot
  pool.put(0, 17, TokenPayload{17, 0.0f});
  pool.put(0, 18, TokenPayload{18, 0.0f});
  pool.kill(0, 17);
  EXPECT_EQ(pool.load_key_group_meta(0, 16), meta);
  EXPECT_THROW(pool.move(0, 18, 1, 0), std::logic_error);
}

TEST(UnifiedPageManager, Figure5PromptPhaseThenDecodeThenFinish) {
  for (CompactionMode mode : {CompactionMode::kParallel, CompactionMode::kSequential}) {
    UnifiedPageManager m(figure5_config(mode));
    EXPECT_EQ(m.table_length(), 5);  // ceil(16 / 4) + 1
    m.admit(0);
    PromptRequest p{0, 16, {{4, 6, {}, {}}, {8, 8, {}, {}}}};
    const std::vector<PromptRequest> batch{p};
    m.prompt_phase(batch);
    // Round 1: head 0 got 0..3, head 1 got 4..7. Round 2: head 0 keeps 0 (high) and 1 (low),
    // recycles 2, 3; head 1 keeps 4, 5 (high) and 6 (low), recycles 7.
    EXPECT_EQ(side(m.table(0, 0, 0), kHighTier), (std::vector<PageId>{0}));
    EXPECT_EQ(side(m.table(0, 0, 0), kLowTier), (std::vector<PageId>{1}));
    EXPECT_EQ(side(m.table(0, 0, 1), kHighTier), (std::vector<PageId>{4, 5}));
    EXPECT_EQ(side(m.table(0, 0, 1), kLowTier), (std::vector<PageId>{6}));
    EXPECT_EQ(m.free_list().free_ids(), (std::vector<PageId>{8, 9, 2, 3, 7}));
    EXPECT_EQ(m.live_tokens(0, 0, 0, kLowTier), 6);
    PageManagerStats s = m.stats();
    EXPECT_EQ(s.tiers[0].pages, 3);
    EXPECT_EQ(s.tiers[1].pages, 2);
    EXPECT_DOUBLE_EQ(s.internal_fragmentation, 1.0 - 26.0 / 28.0);  // 12 + 14 live of 12 + 16 slots
    EXPECT_EQ(s.ids_copied, 8 + 3);
    EXPECT_EQ(m.bytes_held(0, 0, 1), 3 * 224);
    // Decode: head 0's high page is full, so it gets a new page (8); head 1 evicts a high token
    // and its new token takes that slot.
    // (Live token 4 of head 1, in walk order, is high page 1, slot 0.)
    std::vector<DecodeHead> step{{HeadKey{0, 0, 0}, {16, 0.5f}, {}},
                                 {HeadKey{0, 0, 1}, {16, 0.5f}, evict(4)}};
    m.decode_step(step);
    EXPECT_EQ(side(m.table(0, 0, 0), kHighTier), (std::vector<PageId>{0, 8}));
    EXPECT_EQ(m.find_slot(0, 0, 1, kHighTier, 16), (SlotRef{kHighTier, 1, 0}));
    EXPECT_EQ(m.free_list().free_ids(), (std::vector<PageId>{9, 2, 3, 7}));
    // Demote: head 1 moves token 0 (high page 0, slot 0) to its low page, whose slots are full,
    // so it gets page 9; the new token takes the freed high slot.
    std::vector<DecodeHead> step2{{HeadKey{0, 0, 1}, {17, 0.5f}, demote(0)}};
    m.decode_step(step2);
    EXPECT_EQ(side(m.table(0, 0, 1), kLowTier), (std::vector<PageId>{6, 9}));
    EXPECT_TRUE(m.pool().live(9, 0));
    EXPECT_EQ(m.pool().payload(9, 0).position, 0);  // high token 0 (default payload positions)
    EXPECT_EQ(m.find_slot(0, 0, 1, kHighTier, 17), (SlotRef{kHighTier, 0, 0}));
    m.finish(0);
    EXPECT_FALSE(m.has_request(0));
    EXPECT_EQ(m.free_list().free_ids(), (std::vector<PageId>{2, 3, 7, 0, 8, 1, 4, 5, 6, 9}));
  }
}

TEST(UnifiedPageManager, ExhaustedPromptChangesNothing) {
  PageManagerConfig c = figure5_config(CompactionMode::kParallel);
  c.pool.pages = 7;  // 8 conservative pages are needed
  UnifiedPageManager m(c);
  m.admit(0);
  const std::vector<PromptRequest> batch{PromptRequest{0, 16, {{16, 0, {}, {}}, {1, 0, {}, {}}}}};
  EXPECT_THROW(m.prompt_phase(batch), PoolExhausted);
  EXPECT_EQ(m.free_list().free_count(), 7);
  EXPECT_EQ(m.table(0, 0, 0).used(), 0);
  EXPECT_FALSE(m.prompted(0));
}

TEST(UnifiedPageManager, BadInputNamesTheHead) {
  UnifiedPageManager m(figure5_config(CompactionMode::kSequential));
  m.admit(4);
  const std::vector<PromptRequest> batch{PromptRequest{4, 16, {{12, 6, {}, {}}, {1, 0, {}, {}}}}};
  try {
    m.prompt_phase(batch);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("request 4, layer 0, head 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m.admit(4), InputError);
  EXPECT_THROW(m.finish(5), InputError);
}

// KIVI's residual flush: 4 tokens per high page, 8 per low page. Head 0 holds 6 prompt tokens at
// high (pages 2) and 0 low; a flush moves all 6 to low in walk (position) order (one low page
// allocated), recycles the second high page and appends the new token in the first.
TEST(UnifiedPageManager, FlushMovesEveryHighTokenToLowAndRecyclesHighPages) {
  for (CompactionMode mode : {CompactionMode::kParallel, CompactionMode::kSequential}) {
    UnifiedPageManager m(figure5_config(mode));
    m.admit(0);
    PromptRequest p{0, 6, {{6, 0, {}, {}}, {6, 0, {}, {}}}};
    m.prompt_phase({&p, 1});
    ASSERT_EQ(m.table(0, 0, 0).count(kHighTier), 2);
    const std::int64_t free_before = m.free_list().free_count();
    DecodeHead flush{HeadKey{0, 0, 0}, TokenPayload{6, 0.0f}, flush_all()};
    DecodeHead plain{HeadKey{0, 0, 1}, TokenPayload{6, 0.0f}, {}};
    const std::vector<DecodeHead> ops{flush, plain};
    m.decode_step(ops);
    const PageTable& t = m.table(0, 0, 0);
    EXPECT_EQ(t.count(kHighTier), 1);
    EXPECT_EQ(t.count(kLowTier), 1);
    EXPECT_EQ(m.live_tokens(0, 0, 0, kHighTier), 1);
    EXPECT_EQ(m.live_tokens(0, 0, 0, kLowTier), 6);
    // One low page taken, one high page back: the free count is unchanged.
    EXPECT_EQ(m.free_list().free_count(), free_before);
    for (std::int32_t pos = 0; pos < 6; ++pos) {
      const std::optional<SlotRef> s = m.find_slot(0, 0, 0, kLowTier, pos);
      ASSERT_TRUE(s.has_value()) << pos;
      EXPECT_EQ(*s, (SlotRef{kLowTier, 0, pos})) << "flushed tokens keep their order";
    }
    EXPECT_EQ(m.find_slot(0, 0, 0, kHighTier, 6), (SlotRef{kHighTier, 0, 0}));
    // The other head was not flushed: its 7th token went into its second high page.
    EXPECT_EQ(m.live_tokens(0, 0, 1, kHighTier), 7);
    EXPECT_EQ(m.table(0, 0, 1).count(kLowTier), 0);
    // A flush takes no victim.
    DecodeHead bad = flush;
    bad.token.position = 7;
    bad.decision.evict = 0;
    EXPECT_THROW(m.decode_step({&bad, 1}), InputError);
    m.finish(0);
    EXPECT_EQ(m.free_list().free_count(), 10);
  }
}

// SpvLLM's strategies on two heads with 5 prompt tokens each (pages A, B: 4 + 1 tokens). Four
// steps evict the oldest token: head 0 under free-block, head 1 under no-op. The new tokens go
// after the last live slot of B; at the fourth step B is full and A empty: both heads take a new
// page, and free-block returns A. Then a sparse-copy step in which only head 0 evicts repacks
// every head: head 1's newest page moves into its emptied A and goes back.
TEST(UnifiedPageManager, SlotStrategiesAppendFreeEmptiedPagesAndRepack) {
  for (CompactionMode mode : {CompactionMode::kParallel, CompactionMode::kSequential}) {
    UnifiedPageManager m(figure5_config(mode));
    m.admit(0);
    PromptRequest p{0, 5, {{5, 0, {}, {}}, {5, 0, {}, {}}}};
    m.prompt_phase({&p, 1});
    ASSERT_EQ(side(m.table(0, 0, 0), kHighTier), (std::vector<PageId>{0, 1}));
    ASSERT_EQ(side(m.table(0, 0, 1), kHighTier), (std::vector<PageId>{2, 3}));
    for (std::int32_t s = 0; s < 4; ++s) {
      const std::vector<DecodeHead> step{
          {HeadKey{0, 0, 0}, {5 + s, 0.0f}, evict(0), SlotStrategy::kFreeBlock},
          {HeadKey{0, 0, 1}, {5 + s, 0.0f}, evict(0), SlotStrategy::kNoOp}};
      m.decode_step(step);
      if (s < 3) {
        EXPECT_EQ(m.find_slot(0, 0, 0, kHighTier, 5 + s), (SlotRef{kHighTier, 1, s + 1}));
        EXPECT_EQ(m.find_slot(0, 0, 1, kHighTier, 5 + s), (SlotRef{kHighTier, 1, s + 1}));
      }
    }
    EXPECT_EQ(side(m.table(0, 0, 0), kHighTier), (std::vector<PageId>{1, 4}));
    EXPECT_EQ(side(m.table(0, 0, 1), kHighTier), (std::vector<PageId>{2, 3, 5}));
    EXPECT_EQ(m.free_list().free_ids(), (std::vector<PageId>{6, 7, 8, 9, 0}));
    EXPECT_EQ(m.find_slot(0, 0, 0, kHighTier, 8), (SlotRef{kHighTier, 1, 0}));
    // A demotion takes a freed slot, which the appending strategies never reuse.
    const DecodeHead refused{HeadKey{0, 0, 0}, {9, 0.0f}, demote(0), SlotStrategy::kNoOp};
    EXPECT_THROW(m.decode_step({&refused, 1}), InputError);
    const std::vector<DecodeHead> sparse{
        {HeadKey{0, 0, 0}, {9, 0.0f}, evict(0), SlotStrategy::kSparseCopy},
        {HeadKey{0, 0, 1}, {9, 0.0f}, {}, SlotStrategy::kSparseCopy}};
    m.decode_step(sparse);
    EXPECT_EQ(side(m.table(0, 0, 0), kHighTier), (std::vector<PageId>{1, 4}));
    EXPECT_EQ(m.find_slot(0, 0, 0, kHighTier, 9), (SlotRef{kHighTier, 1, 1}));
    EXPECT_EQ(side(m.table(0, 0, 1), kHighTier), (std::vector<PageId>{2, 3}));
    EXPECT_EQ(m.find_slot(0, 0, 1, kHighTier, 8), (SlotRef{kHighTier, 0, 0}));
    EXPECT_EQ(m.find_slot(0, 0, 1, kHighTier, 9), (SlotRef{kHighTier, 0, 1}));
    EXPECT_EQ(m.free_list().free_ids(), (std::vector<PageId>{6, 7, 8, 9, 0, 5}));
  }
}

}  // namespace
}  // namespace kvcheck
