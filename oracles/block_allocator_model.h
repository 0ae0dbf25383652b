// A plain model of the vLLM-style block allocator (optimized/block_allocator.h) with SpvLLM's four
// slot strategies (optimized/slot_strategies.h), for the stateful properties. It depends on
// nothing in optimized/: it keeps a std::set of free ids, a std::list for the LRU, a map from the
// whole token prefix to the cached block (no hashing at all, so a hash collision in the engine
// shows up as a difference), and per block its refcount, fill count, live flags and payload.
//
// The semantics it defines, and the engine must match exactly (the properties compare block ids):
//   - refcount(b) = number of block-table entries, over all sequences, that hold b. The prefix
//     cache holds no reference. A block is in exactly one of: the free set; the LRU (cached and
//     refcount 0: "idle", still reusable by a lookup); owned (refcount > 0, cached or not).
//     available = free + idle; used = owned; free + idle + used = pool.
//   - take a block: the lowest free id; when none is free, the oldest idle cached block, which
//     leaves the cache together with every cached descendant (they can no longer be reached by a
//     chain lookup; idle descendants go to the free set).
//   - release a block: refcount - 1; at 0 a cached block goes to the back of the LRU, any other
//     block to the free set. A sequence releases its table from the last entry to the first.
//   - admit: leading full prompt blocks found in the cache (chain lookup, stops at the first
//     miss) are shared (refcount + 1, leave the LRU); the rest are taken and filled, and each new
//     full block is registered. Exhaustion when the new blocks exceed free + idle - idle hits.
//   - append (at the end): into the last block when it has an unwritten slot, else a new block.
//     A block that becomes full, all live, holding positions i*bs.. at table index i, with a
//     cached parent at index i-1 holding positions (i-1)*bs.. (or i = 0), is registered unless an
//     equal entry exists.
//   - write into a block (append, reuse a dead slot, mark a slot dead): when the block is shared
//     (refcount > 1) it is copied first into a taken block (copy-on-write: the table entry moves
//     to the copy, the old block loses one reference); when the writer is its only owner and it
//     is cached, it leaves the cache (with its descendants) and is written in place.
//   - evict (no-op, free-block, slot-reuse): the victim slot is marked dead. With free-block and
//     slot-reuse, when the victim is the block's last live slot the table entry is removed and the
//     block released instead (no copy, even when shared).
//   - reuse (slot-reuse): the new token goes into the first dead slot in table order, else it is
//     appended at the end.
//   - sparse-copy evict: ceil((live - 1)/bs) destination blocks are taken (exhaustion when more
//     than available), the live slots other than the victim are copied densely in table order,
//     then the old table is released; nothing is registered.
//   - fork: the child's table is the parent's, every block refcount + 1; never exhausts.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace kvcheck {

class BlockAllocatorModel {
 public:
  enum class Strategy { kNoOp, kFreeBlock, kSparseCopy, kSlotReuse };

  struct Slot {
    std::int32_t token = 0;
    std::int32_t position = 0;
    bool live = false;
  };
  struct Block {
    std::int64_t refcount = 0;
    std::int64_t filled = 0;  // slots [0, filled) were written (live or dead)
    std::vector<Slot> slots;
  };
  struct Sequence {
    std::vector<std::int32_t> table;
    std::int32_t next_position = 0;
  };

  BlockAllocatorModel(std::int64_t blocks, std::int64_t block_size, bool prefix_cache, Strategy strategy);

  // Each returns false, changing nothing, when the pool is exhausted.
  bool admit(std::int64_t seq, const std::vector<std::int32_t>& prompt);
  // The strategy's append: slot-reuse fills the first dead slot, the others append at the end.
  bool append(std::int64_t seq, std::int32_t token);
  bool evict(std::int64_t seq, std::int32_t position);
  // Append at the end whatever the strategy (the copy-on-write command).
  bool append_at_end(std::int64_t seq, std::int32_t token) { return append_end(seqs_.at(seq), token); }
  void fork(std::int64_t parent, std::int64_t child);
  void release_sequence(std::int64_t seq);  // finish and preempt
  std::int64_t cached_prefix_blocks(const std::vector<std::int32_t>& prompt) const;

  // Inspection.
  std::int64_t block_size() const { return block_size_; }
  std::int64_t pool_size() const { return static_cast<std::int64_t>(blocks_.size()); }
  std::int64_t available() const { return static_cast<std::int64_t>(free_.size() + lru_.size()); }
  bool has(std::int64_t seq) const { return seqs_.count(seq) != 0; }
  const std::set<std::int32_t>& free_ids() const { return free_; }
  const std::list<std::int32_t>& lru() const { return lru_; }
  const std::map<std::vector<std::int32_t>, std::int32_t>& cache() const { return cache_; }
  const std::vector<Block>& blocks() const { return blocks_; }
  const std::map<std::int64_t, Sequence>& sequences() const { return seqs_; }
  // The key of a cached block (its whole token prefix), or nullptr.
  const std::vector<std::int32_t>* key_of(std::int32_t block) const;
  // The live (position, token) pairs of a sequence, by position.
  std::vector<std::pair<std::int32_t, std::int32_t>> live_tokens(std::int64_t seq) const;
  std::int64_t live_count(std::int64_t seq) const;

  // Statistics of the sparse-copy strategy.
  std::int64_t copied_slots() const { return copied_slots_; }
  std::int64_t preallocated_blocks() const { return preallocated_blocks_; }

 private:
  std::int32_t take();
  void release(std::int32_t block);
  void uncache(std::int32_t block);
  bool try_register(Sequence& s, std::size_t index);
  // Copy-on-write or leave the cache; returns false when a copy is needed and nothing is available.
  bool make_writable(Sequence& s, std::size_t index);
  bool append_end(Sequence& s, std::int32_t token);
  std::int64_t live_in(std::int32_t block) const;

  std::int64_t block_size_;
  bool prefix_cache_;
  Strategy strategy_;
  std::vector<Block> blocks_;
  std::set<std::int32_t> free_;
  std::list<std::int32_t> lru_;
  std::map<std::vector<std::int32_t>, std::int32_t> cache_;
  std::map<std::int32_t, std::vector<std::int32_t>> key_;
  std::map<std::int64_t, Sequence> seqs_;
  std::int64_t copied_slots_ = 0;
  std::int64_t preallocated_blocks_ = 0;
};

}  // namespace kvcheck
