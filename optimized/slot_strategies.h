// SpvLLM's four slot strategies under per-step eviction, on the vLLM-style block allocator
// (papers/001: no-op, free-block, sparse-copy, and SpvLLM's slot-reuse).
//
// A decode step appends one token; when the sequence then holds more live tokens than its
// budget, the caller evicts one victim (by position). What the strategies do with the victim:
//   no-op       the slot is masked dead; blocks are never freed before the sequence ends.
//   free-block  the slot is masked dead; a block whose slots are all dead returns to the pool.
//   sparse-copy the live tokens other than the victim are copied densely into pre-allocated
//               destination blocks and the old blocks are released (copy volume and
//               pre-allocation are counted).
//   slot-reuse  as free-block, and the next token is written into a dead slot when there is one
//               (first in table order) instead of being appended.
// The per-slot live masks are what the attention kernels honour: view() gives a sequence's block
// ids and one bitmask per block (bit j: slot j live).
//
// Internal fragmentation = 1 - live slots / allocated slots, allocated = blocks in the table x
// block size (a block shared by two sequences counts for each of them, as vLLM's per-sequence
// view does; the pool-wide used blocks are in FragmentationStats::blocks_used).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "optimized/block_allocator.h"
#include "optimized/step_decision.h"

namespace kvcheck {


// One sequence as the attention kernel sees it.
struct SequenceSlotView {
  std::int64_t block_size = 0;
  std::vector<BlockId> blocks;
  std::vector<std::uint64_t> live_masks;  // one per block
};

struct FragmentationStats {
  std::int64_t blocks_used = 0;      // pool-wide: owned by some sequence
  std::int64_t blocks_free = 0;      // pool-wide: free list + idle cached
  std::int64_t live_slots = 0;       // over the sequences asked about
  std::int64_t allocated_slots = 0;  // table entries x block size over those sequences
  double fragmentation() const {
    return allocated_slots == 0 ? 0.0 : 1.0 - static_cast<double>(live_slots) / static_cast<double>(allocated_slots);
  }
};

struct CopyStats {
  std::int64_t copies = 0;               // sparse copies performed
  std::int64_t copied_slots = 0;
  std::int64_t copied_bytes = 0;         // copied_slots x bytes_per_slot
  std::int64_t preallocated_blocks = 0;  // destination blocks taken for sparse copies
};

class SlotManager {
 public:
  // `bytes_per_slot`: what one slot costs to copy (default: this allocator's payload).
  SlotManager(BlockAllocator& allocator, SlotStrategy strategy,
              std::int64_t bytes_per_slot = static_cast<std::int64_t>(sizeof(SlotPayload)));

  SlotStrategy strategy() const { return strategy_; }
  BlockAllocator& allocator() { return allocator_; }
  const BlockAllocator& allocator() const { return allocator_; }

  // The strategy's append: slot-reuse fills the first dead slot when there is one.
  void append(SeqId seq, std::int32_t token);
  // The strategy's eviction of the live slot holding `position`.
  void evict(SeqId seq, std::int32_t position);
  // One decode step: append, then evict `victim` only when live tokens exceed `budget`. Returns
  // whether it evicted. Each half is atomic (PoolExhausted changes nothing of that half).
  bool decode_step(SeqId seq, std::int32_t token, std::int64_t budget, std::int32_t victim);

  SequenceSlotView view(SeqId seq) const;
  FragmentationStats fragmentation(SeqId seq) const;
  FragmentationStats fragmentation(std::span<const SeqId> seqs) const;
  FragmentationStats fragmentation() const;  // every sequence
  const CopyStats& copy_stats() const { return copy_; }

 private:
  BlockAllocator& allocator_;
  SlotStrategy strategy_;
  std::int64_t bytes_per_slot_;
  CopyStats copy_;
};

}  // namespace kvcheck
