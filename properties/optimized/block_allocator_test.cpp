// Hand-computed cases for the block allocator, its prefix cache and the four slot strategies:
// copy-on-write copies exactly one block; the chain hash tells the same block contents under
// different parents apart; collisions never return a wrong block; LRU order of idle cached
// blocks; exhaustion changes nothing; each strategy's fragmentation on a tiny eviction sequence.
#include <gtest/gtest.h>

#include <vector>

#include "optimized/block_allocator.h"
#include "optimized/pool_exhausted.h"
#include "optimized/prefix_cache.h"
#include "optimized/slot_strategies.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using Tokens = std::vector<std::int32_t>;

BlockAllocatorConfig config(std::int64_t blocks, std::int64_t block_size, bool prefix_cache = true, int hash_bits = 64) {
  return BlockAllocatorConfig{blocks, block_size, prefix_cache, hash_bits, true};
}

TEST(BlockAllocator, CopyOnWriteCopiesExactlyOneBlock) {
  BlockAllocator a(config(8, 4));
  a.admit(0, Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});  // blocks 0, 1 (full, cached), 2 (2 tokens)
  EXPECT_EQ(a.block_table(0), (std::vector<BlockId>{0, 1, 2}));
  a.fork(0, 1);
  for (const BlockId b : {0, 1, 2}) EXPECT_EQ(a.refcount(b), 2);
  a.append(1, 99);  // the shared last block has room: copied to block 3, and only it
  EXPECT_EQ(a.cow_copies(), 1);
  EXPECT_EQ(a.block_table(0), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(a.block_table(1), (std::vector<BlockId>{0, 1, 3}));
  EXPECT_EQ(a.refcount(0), 2);
  EXPECT_EQ(a.refcount(1), 2);
  EXPECT_EQ(a.refcount(2), 1);  // the old block lost the child's reference
  EXPECT_EQ(a.refcount(3), 1);
  EXPECT_EQ(a.payload(3, 0), (SlotPayload{9, 8}));
  EXPECT_EQ(a.payload(3, 1), (SlotPayload{10, 9}));
  EXPECT_EQ(a.payload(3, 2), (SlotPayload{99, 10}));
  EXPECT_EQ(a.payload(2, 2), SlotPayload{});  // the parent's block is untouched (poison)
  EXPECT_EQ(a.filled(2), 2);
  EXPECT_EQ(a.filled(3), 3);
  // The parent appends into its own (now unshared) block in place.
  a.append(0, 77);
  EXPECT_EQ(a.cow_copies(), 1);
  EXPECT_EQ(a.payload(2, 2), (SlotPayload{77, 10}));
  EXPECT_EQ(a.used_count(), 4);
}

TEST(BlockAllocator, AppendAfterAFullSharedBlockDoesNotCopy) {
  BlockAllocator a(config(8, 4));
  a.admit(0, Tokens{1, 2, 3, 4, 5, 6, 7, 8});
  a.fork(0, 1);
  a.append(1, 9);
  EXPECT_EQ(a.cow_copies(), 0);
  EXPECT_EQ(a.block_table(1), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(a.refcount(1), 2);
}

TEST(PrefixCache, ChainHashDistinguishesParents) {
  const Tokens a{1, 2}, b{3, 4}, c{5, 6};
  const std::uint64_t ha = PrefixCache::chain_hash(PrefixCache::kRootHash, a);
  const std::uint64_t hc = PrefixCache::chain_hash(PrefixCache::kRootHash, c);
  EXPECT_NE(PrefixCache::chain_hash(ha, b), PrefixCache::chain_hash(hc, b));
  EXPECT_NE(PrefixCache::chain_hash(PrefixCache::kRootHash, b), PrefixCache::chain_hash(ha, b));
  EXPECT_EQ(PrefixCache::chain_hash(ha, b), PrefixCache::chain_hash(ha, Tokens{3, 4}));

  BlockAllocator alloc(config(8, 2));
  alloc.admit(0, Tokens{1, 2, 3, 4});  // [A B] -> blocks 0, 1
  alloc.admit(1, Tokens{5, 6, 3, 4});  // [C B]: C misses, so B is not shared: blocks 2, 3
  EXPECT_EQ(alloc.block_table(1), (std::vector<BlockId>{2, 3}));
  EXPECT_EQ(alloc.prefix_cache().parent_of(1), 0);
  EXPECT_EQ(alloc.prefix_cache().parent_of(3), 2);
  EXPECT_NE(alloc.prefix_cache().hash_of(1), alloc.prefix_cache().hash_of(3));
  EXPECT_EQ(alloc.cached_prefix_blocks(Tokens{1, 2, 3, 4}), 2);
  EXPECT_EQ(alloc.cached_prefix_blocks(Tokens{5, 6, 3, 4}), 2);
  EXPECT_EQ(alloc.cached_prefix_blocks(Tokens{3, 4}), 0);  // B as a first block is not cached
  alloc.admit(2, Tokens{5, 6, 3, 4, 9});                    // hits 2, 3; one new block
  EXPECT_EQ(alloc.block_table(2), (std::vector<BlockId>{2, 3, 4}));
  EXPECT_EQ(alloc.refcount(3), 2);
}

TEST(PrefixCache, CollisionsNeverReturnAWrongBlock) {
  // One hash bit: every entry lands in one of two buckets.
  BlockAllocator a(config(16, 2, true, 1));
  for (std::int32_t i = 0; i < 6; ++i) a.admit(i, Tokens{i, i + 1});
  for (std::int32_t i = 0; i < 6; ++i) {
    EXPECT_EQ(a.cached_prefix_blocks(Tokens{i, i + 1}), 1) << i;
    EXPECT_EQ(a.prefix_cache().find(kNoBlock, Tokens{i, i + 1}), i) << i;
  }
  EXPECT_EQ(a.cached_prefix_blocks(Tokens{1, 0}), 0);
  EXPECT_EQ(a.cached_prefix_blocks(Tokens{7, 8}), 0);
}

TEST(PrefixCache, LruOrderAndReuseOnlyWhenTheFreeListIsEmpty) {
  BlockAllocator a(config(4, 2));
  a.admit(0, Tokens{1, 2, 3, 4});  // blocks 0, 1 (cached)
  a.admit(1, Tokens{5, 6});        // block 2 (cached)
  a.free_sequence(0);              // released last to first: LRU [1, 0]
  a.free_sequence(1);              // LRU [1, 0, 2]
  EXPECT_EQ(a.prefix_cache().idle_order(), (std::vector<BlockId>{1, 0, 2}));
  EXPECT_EQ(a.free_count(), 1);
  EXPECT_EQ(a.available(), 4);
  // Two new blocks: the free block 3 first, then the oldest idle block 1 leaves the cache.
  a.admit(2, Tokens{7, 8, 9, 10});
  EXPECT_EQ(a.block_table(2), (std::vector<BlockId>{3, 1}));
  EXPECT_EQ(a.prefix_cache().idle_order(), (std::vector<BlockId>{0, 2}));
  EXPECT_EQ(a.cached_prefix_blocks(Tokens{1, 2, 3, 4}), 1);  // block 0 still cached, block 1 gone
  EXPECT_EQ(a.prefix_cache().parent_of(1), 3);              // block 1 now holds [9, 10] under [7, 8]
  // A hit takes the idle block 0 out of the LRU; the new block reuses the oldest idle, 2.
  a.admit(3, Tokens{1, 2, 11, 12});
  EXPECT_EQ(a.block_table(3), (std::vector<BlockId>{0, 2}));
  EXPECT_EQ(a.prefix_cache().idle_count(), 0);
  EXPECT_EQ(a.cached_prefix_blocks(Tokens{5, 6}), 0);
  // Released again, a block goes to the back (most recently used).
  a.free_sequence(3);
  EXPECT_EQ(a.prefix_cache().idle_order(), (std::vector<BlockId>{2, 0}));
}

TEST(PrefixCache, AWrittenCachedBlockLeavesWithItsDescendants) {
  BlockAllocator a(config(4, 2));
  a.admit(0, Tokens{1, 2, 3, 4});
  EXPECT_EQ(a.prefix_cache().size(), 2);
  a.evict(0, 0, false);  // sole owner writes block 0 in place: it and its child leave the cache
  EXPECT_EQ(a.prefix_cache().size(), 0);
  EXPECT_EQ(a.cached_prefix_blocks(Tokens{1, 2, 3, 4}), 0);
  EXPECT_EQ(a.payload(0, 0), SlotPayload{});
  EXPECT_EQ(a.live_tokens(0), 3);
}

// An admission that fails counts as available only the blocks it could still take: the free
// ones and the idle cached ones other than the prompt's own hits (which it reuses, not spends).
TEST(BlockAllocator, ExhaustionReportsWhatIsLeftBesideThePromptsHits) {
  BlockAllocator a(config(4, 2));
  a.admit(0, Tokens{1, 2, 3, 4});  // blocks 0 and 1, full and cached
  a.free_sequence(0);              // both idle: still cached, refcount 0
  ASSERT_EQ(a.available(), 4);
  try {
    a.admit(1, Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});  // hits blocks 0 and 1, needs 3 more
    FAIL() << "expected PoolExhausted";
  } catch (const PoolExhausted& e) {
    EXPECT_GE(e.needed(), 3);
    EXPECT_EQ(e.available(), 2);  // 2 free + 2 idle - the 2 idle hits
  }
  EXPECT_FALSE(a.has_sequence(1));
  EXPECT_EQ(a.available(), 4);
  EXPECT_EQ(a.cached_prefix_blocks(Tokens{1, 2, 3, 4}), 2);
}

TEST(BlockAllocator, ExhaustionChangesNothing) {
  BlockAllocator a(config(2, 2));
  a.admit(0, Tokens{1, 2, 3});
  try {
    a.admit(1, Tokens{4});
    FAIL() << "expected PoolExhausted";
  } catch (const PoolExhausted& e) {
    EXPECT_EQ(e.needed(), 1);
    EXPECT_EQ(e.available(), 0);
  }
  EXPECT_FALSE(a.has_sequence(1));
  a.append(0, 4);  // room in the last block
  EXPECT_THROW(a.append(0, 5), PoolExhausted);
  EXPECT_EQ(a.next_position(0), 4);
  EXPECT_EQ(a.live_tokens(0), 4);
  EXPECT_EQ(a.free_count(), 0);
  EXPECT_THROW(a.evict(0, 9, false), InputError);
  EXPECT_THROW(a.append(7, 1), InputError);
  EXPECT_THROW(a.admit(0, Tokens{1}), InputError);
}

// Budget 4, block size 4, prompt of 4 tokens (positions 0-3); five decode steps, each appending
// position 4 + k and evicting position k.
struct Worked {
  BlockAllocator alloc{config(8, 4, false)};
  SlotManager mgr;
  explicit Worked(SlotStrategy s) : mgr(alloc, s) {
    alloc.admit(0, Tokens{10, 11, 12, 13});
    for (std::int32_t k = 0; k < 5; ++k) EXPECT_TRUE(mgr.decode_step(0, 20 + k, 4, k));
  }
};

TEST(SlotStrategies, FragmentationOnAHandWorkedEvictionSequence) {
  {
    // no-op: positions 4-7 fill block 1, 8 goes to block 2; block 0 all dead, block 1 slot 0 dead.
    Worked w(SlotStrategy::kNoOp);
    EXPECT_EQ(w.alloc.block_table(0), (std::vector<BlockId>{0, 1, 2}));
    EXPECT_DOUBLE_EQ(w.mgr.fragmentation(0).fragmentation(), 1.0 - 4.0 / 12.0);
    const SequenceSlotView v = w.mgr.view(0);
    EXPECT_EQ(v.live_masks, (std::vector<std::uint64_t>{0b0000, 0b1110, 0b0001}));
  }
  {
    // free-block: block 0 is freed at step 4; position 8 takes the lowest free id, 0 again.
    Worked w(SlotStrategy::kFreeBlock);
    EXPECT_EQ(w.alloc.block_table(0), (std::vector<BlockId>{1, 0}));
    EXPECT_DOUBLE_EQ(w.mgr.fragmentation(0).fragmentation(), 0.5);
    EXPECT_EQ(w.mgr.view(0).live_masks, (std::vector<std::uint64_t>{0b1110, 0b0001}));
  }
  {
    // slot-reuse: positions 5-8 refill block 0's dead slots; block 1 (position 4 only) is freed.
    Worked w(SlotStrategy::kSlotReuse);
    EXPECT_EQ(w.alloc.block_table(0), (std::vector<BlockId>{0}));
    EXPECT_DOUBLE_EQ(w.mgr.fragmentation(0).fragmentation(), 0.0);
    EXPECT_EQ(w.alloc.payload(0, 0), (SlotPayload{21, 5}));
    EXPECT_EQ(w.alloc.payload(0, 3), (SlotPayload{24, 8}));
  }
  {
    // sparse-copy: each step copies the 4 survivors into one pre-allocated block.
    Worked w(SlotStrategy::kSparseCopy);
    EXPECT_EQ(w.alloc.block_table(0), (std::vector<BlockId>{2}));
    EXPECT_DOUBLE_EQ(w.mgr.fragmentation(0).fragmentation(), 0.0);
    EXPECT_EQ(w.mgr.copy_stats().copies, 5);
    EXPECT_EQ(w.mgr.copy_stats().copied_slots, 20);
    EXPECT_EQ(w.mgr.copy_stats().copied_bytes, 20 * 8);
    EXPECT_EQ(w.mgr.copy_stats().preallocated_blocks, 5);
    EXPECT_EQ(w.alloc.peak_used(), 3);
    for (std::int32_t j = 0; j < 4; ++j) EXPECT_EQ(w.alloc.payload(2, j), (SlotPayload{21 + j, 5 + j}));
  }
  {
    // No eviction: 9 tokens in 3 blocks.
    BlockAllocator alloc(config(8, 4, false));
    SlotManager mgr(alloc, SlotStrategy::kNoOp);
    alloc.admit(0, Tokens{10, 11, 12, 13});
    for (std::int32_t k = 0; k < 5; ++k) EXPECT_FALSE(mgr.decode_step(0, 20 + k, 1 << 20, -1));
    EXPECT_DOUBLE_EQ(mgr.fragmentation(0).fragmentation(), 0.25);
  }
}

}  // namespace
}  // namespace kvcheck
