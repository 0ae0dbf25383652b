// The vLLM-style block allocator of the fixed-format baseline (docs/design.md §6, "The vLLM-style
// baseline"; the primer's paging, copy-on-write and prefix caching; SpvLLM's per-slot masks).
//
// A pool of `num_blocks` blocks of `block_size` token slots (16 by default, at most 64). Every
// slot holds a real payload (token id and position, int32 each) so that copies can be checked.
// Per block: refcount, fill count (slots [0, filled) were written) and a live bitmask. Per
// sequence: its block table, live token count and next position.
//
// The exact semantics (which id is taken, when a block is copied, registered, released) are
// defined in oracles/block_allocator_model.h, which the properties compare against block id by
// block id. In short: the lowest free id is taken first; when none is free the oldest idle cached
// block is reused; refcount = number of table entries holding the block (the prefix cache holds
// none); a write into a shared block copies that one block (copy-on-write); a sequence's blocks
// are released from its last to its first.
//
// Every operation either completes or throws, changing nothing: PoolExhausted (the caller may
// preempt and retry) or InputError (an unknown or duplicate sequence, a position that is not
// live). With `poison`, free blocks and dead or unwritten slots hold kPoison in both payload
// words (the test configuration: a check after every command finds anything live overwritten).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "optimized/prefix_cache.h"

namespace kvcheck {

using SeqId = std::int64_t;

inline constexpr std::int32_t kPoison = -559038737;  // 0xDEADBEEF

struct BlockAllocatorConfig {
  std::int64_t num_blocks = 1024;
  std::int64_t block_size = 16;
  bool prefix_cache = true;
  int hash_bits = 64;     // bucket bits of the prefix cache (tests: a few, to force collisions)
  bool poison = false;    // fill free blocks and dead slots with kPoison
};

struct SlotPayload {
  std::int32_t token = kPoison;
  std::int32_t position = kPoison;
  friend bool operator==(const SlotPayload&, const SlotPayload&) = default;
};

class BlockAllocator {
 public:
  explicit BlockAllocator(const BlockAllocatorConfig& config);

  const BlockAllocatorConfig& config() const { return config_; }
  std::int64_t block_size() const { return config_.block_size; }
  std::int64_t pool_size() const { return config_.num_blocks; }

  // A new sequence holding `prompt` at positions 0..n-1. Leading full blocks found in the prefix
  // cache are shared (refcount + 1); the others are taken, filled and registered.
  void admit(SeqId seq, std::span<const std::int32_t> prompt);
  // Appends a token at the end (next position): into the last block when it has an unwritten
  // slot (copying it first when shared), else into a new block.
  void append(SeqId seq, std::int32_t token);
  // Writes a token (next position) into the first dead slot in table order; false, changing
  // nothing, when the sequence has no dead slot.
  bool reuse_dead_slot(SeqId seq, std::int32_t token);
  // Marks the slot holding `position` dead (copying its block first when shared). With
  // `free_empty_block`, a victim that is its block's last live slot removes the block from the
  // table and releases it instead (no copy).
  void evict(SeqId seq, std::int32_t position, bool free_empty_block);
  // Sparse copy without `position`: takes ceil((live - 1)/bs) destination blocks, copies the
  // other live slots densely in table order, releases the old blocks. Returns the number of
  // destination blocks (the pre-allocation).
  std::int64_t compact_without(SeqId seq, std::int32_t position);
  // The child shares every block of the parent (refcount + 1 each). Never exhausts.
  void fork(SeqId parent, SeqId child);
  // Finish: releases every block of the sequence, last to first.
  void free_sequence(SeqId seq);
  // Preempt (recompute): as free_sequence, returning the live slots by position.
  std::vector<SlotPayload> preempt(SeqId seq);
  // Leading full blocks of `prompt` the cache holds now (changes nothing).
  std::int64_t cached_prefix_blocks(std::span<const std::int32_t> prompt) const;

  // Inspection.
  bool has_sequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  std::vector<SeqId> sequences() const;  // ascending
  const std::vector<BlockId>& block_table(SeqId seq) const { return get(seq).table; }
  std::int64_t live_tokens(SeqId seq) const { return get(seq).live; }
  std::int32_t next_position(SeqId seq) const { return get(seq).next_position; }
  std::int64_t refcount(BlockId b) const { return blocks_[index(b)].refcount; }
  std::int64_t filled(BlockId b) const { return blocks_[index(b)].filled; }
  std::uint64_t live_mask(BlockId b) const { return blocks_[index(b)].live; }
  const SlotPayload& payload(BlockId b, std::int64_t slot) const {
    return slots_[index(b) * static_cast<std::size_t>(config_.block_size) + static_cast<std::size_t>(slot)];
  }
  std::vector<BlockId> free_ids() const { return free_heap_; }  // unordered
  std::int64_t free_count() const { return static_cast<std::int64_t>(free_heap_.size()); }
  std::int64_t idle_count() const { return cache_.idle_count(); }
  std::int64_t available() const { return free_count() + idle_count(); }
  std::int64_t used_count() const { return pool_size() - available(); }
  std::int64_t peak_used() const { return peak_used_; }
  std::int64_t cow_copies() const { return cow_copies_; }
  const PrefixCache& prefix_cache() const { return cache_; }

 private:
  struct Block {
    std::int64_t refcount = 0;
    std::int64_t filled = 0;
    std::uint64_t live = 0;
  };
  struct Sequence {
    std::vector<BlockId> table;
    std::int64_t live = 0;
    std::int32_t next_position = 0;
    std::vector<std::int64_t> where;  // position -> block * block_size + slot, or -1 (not live)
  };
  static std::size_t index(BlockId b) { return static_cast<std::size_t>(b); }
  const Sequence& get(SeqId seq) const;
  Sequence& get(SeqId seq);
  SlotPayload& slot(BlockId b, std::int64_t j) {
    return slots_[index(b) * static_cast<std::size_t>(config_.block_size) + static_cast<std::size_t>(j)];
  }
  void check_available(const char* what, SeqId seq, std::int64_t needed) const;
  BlockId take();
  void release(BlockId b);
  void to_free_list(BlockId b);
  void poison_block(BlockId b);
  void make_writable(Sequence& s, std::size_t i);
  bool needs_copy(BlockId b) const { return blocks_[index(b)].refcount > 1; }
  void try_register(Sequence& s, std::size_t i);
  void release_table(const std::vector<BlockId>& table);
  void note_used();
  // The (table index, slot) holding a live position; InputError when none.
  std::pair<std::size_t, std::int64_t> locate(SeqId seq, const Sequence& s, std::int32_t position, const char* what) const;
  void write(Sequence& s, BlockId b, std::int64_t j, std::int32_t token, std::int32_t position);

  BlockAllocatorConfig config_;
  std::vector<Block> blocks_;
  std::vector<SlotPayload> slots_;
  std::vector<BlockId> free_heap_;  // min-heap: the lowest free id first
  PrefixCache cache_;
  std::unordered_map<SeqId, Sequence> seqs_;
  std::int64_t peak_used_ = 0;
  std::int64_t cow_copies_ = 0;
};

}  // namespace kvcheck
