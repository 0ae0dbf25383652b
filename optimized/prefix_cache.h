// The prefix cache of the vLLM-style block allocator (docs/design.md §6, "The vLLM-style baseline").
//
// Full blocks are keyed by a chain hash: hash(parent block's hash, this block's tokens), the
// first block of a sequence hashing under kRootHash. A lookup walks a prompt block by block from
// the root; a hash match is accepted only when the entry's parent block and tokens compare equal,
// so a collision can never return a wrong block (the properties run with the bucket hash cut to
// a few bits to make collisions common).
//
// Holding semantics (shared with oracles/block_allocator_model.h): the cache holds no reference.
// A cached block whose refcount drops to 0 is "idle": it stays cached, at the back of an LRU
// list, and a lookup may hand it out again. The allocator reuses idle blocks (oldest first) only
// when its free list is empty; a block that leaves the cache takes every cached descendant with
// it (erase_subtree), since no chain lookup can reach them any more.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvcheck {

using BlockId = std::int32_t;
inline constexpr BlockId kNoBlock = -1;

class PrefixCache {
 public:
  static constexpr std::uint64_t kRootHash = 0x6b76636865636b31ULL;  // "kvcheck1"

  // A cache for block ids [0, blocks). `hash_bits` (1..64) cuts the bucket key: tests use a few
  // bits to force collisions; 64 in production.
  PrefixCache(std::int64_t blocks, int hash_bits = 64);

  // hash(parent_hash, tokens): FNV-style mixing with a final avalanche (splitmix64).
  static std::uint64_t chain_hash(std::uint64_t parent_hash, std::span<const std::int32_t> tokens);

  // The cached block holding `tokens` whose parent is `parent` (kNoBlock: the first block), or
  // kNoBlock. Changes nothing (the LRU is updated by acquire/release through the allocator).
  BlockId find(BlockId parent, std::span<const std::int32_t> tokens) const;
  // Registers `block` (not cached) as the child of `parent` (cached, or kNoBlock) holding
  // `tokens`. Returns false, changing nothing, when an equal entry exists or the parent is not
  // cached.
  bool insert(BlockId parent, BlockId block, std::span<const std::int32_t> tokens);
  bool contains(BlockId block) const { return entries_[index(block)].cached; }
  // Removes `block` and its cached descendants from the cache (and from the LRU); returns the
  // removed blocks that were idle, which the caller returns to its free list.
  std::vector<BlockId> erase_subtree(BlockId block);

  std::uint64_t hash_of(BlockId block) const { return entries_[index(block)].hash; }
  BlockId parent_of(BlockId block) const { return entries_[index(block)].parent; }
  const std::vector<std::int32_t>& tokens_of(BlockId block) const { return entries_[index(block)].tokens; }
  std::int64_t size() const { return size_; }

  // The LRU of idle cached blocks: oldest at the front.
  void push_idle(BlockId block);    // becomes the most recently used
  void remove_idle(BlockId block);  // a lookup handed it out again
  bool is_idle(BlockId block) const { return entries_[index(block)].idle; }
  BlockId oldest_idle() const { return lru_head_; }
  std::int64_t idle_count() const { return idle_count_; }
  std::vector<BlockId> idle_order() const;  // oldest first

 private:
  struct Entry {
    bool cached = false;
    bool idle = false;
    std::uint64_t hash = 0;
    BlockId parent = kNoBlock;
    std::vector<std::int32_t> tokens;
    std::vector<BlockId> children;
    BlockId prev = kNoBlock, next = kNoBlock;  // LRU links
  };
  static std::size_t index(BlockId block) { return static_cast<std::size_t>(block); }
  std::uint64_t bucket(std::uint64_t hash) const { return hash & mask_; }
  std::uint64_t parent_hash(BlockId parent) const { return parent == kNoBlock ? kRootHash : entries_[index(parent)].hash; }

  std::vector<Entry> entries_;
  std::unordered_multimap<std::uint64_t, BlockId> by_bucket_;
  std::uint64_t mask_;
  std::int64_t size_ = 0;
  BlockId lru_head_ = kNoBlock, lru_tail_ = kNoBlock;
  std::int64_t idle_count_ = 0;
};

}  // namespace kvcheck
