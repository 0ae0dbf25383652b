#include "optimized/slot_strategies.h"

namespace kvcheck {

SlotManager::SlotManager(BlockAllocator& allocator, SlotStrategy strategy, std::int64_t bytes_per_slot)
    : allocator_(allocator), strategy_(strategy), bytes_per_slot_(bytes_per_slot) {}

void SlotManager::append(SeqId seq, std::int32_t token) {
  if (strategy_ == SlotStrategy::kSlotReuse && allocator_.reuse_dead_slot(seq, token)) return;
  allocator_.append(seq, token);
}

void SlotManager::evict(SeqId seq, std::int32_t position) {
  switch (strategy_) {
    case SlotStrategy::kNoOp:
      allocator_.evict(seq, position, false);
      return;
    case SlotStrategy::kFreeBlock:
    case SlotStrategy::kSlotReuse:
      allocator_.evict(seq, position, true);
      return;
    case SlotStrategy::kSparseCopy: {
      const std::int64_t live_after = allocator_.live_tokens(seq) - 1;
      copy_.preallocated_blocks += allocator_.compact_without(seq, position);
      ++copy_.copies;
      copy_.copied_slots += live_after;
      copy_.copied_bytes += live_after * bytes_per_slot_;
      return;
    }
  }
}

bool SlotManager::decode_step(SeqId seq, std::int32_t token, std::int64_t budget, std::int32_t victim) {
  append(seq, token);
  if (allocator_.live_tokens(seq) <= budget) return false;
  evict(seq, victim);
  return true;
}

SequenceSlotView SlotManager::view(SeqId seq) const {
  SequenceSlotView v;
  v.block_size = allocator_.block_size();
  v.blocks = allocator_.block_table(seq);
  v.live_masks.reserve(v.blocks.size());
  for (const BlockId b : v.blocks) v.live_masks.push_back(allocator_.live_mask(b));
  return v;
}

FragmentationStats SlotManager::fragmentation(std::span<const SeqId> seqs) const {
  FragmentationStats s;
  s.blocks_used = allocator_.used_count();
  s.blocks_free = allocator_.available();
  for (const SeqId seq : seqs) {
    s.live_slots += allocator_.live_tokens(seq);
    s.allocated_slots += static_cast<std::int64_t>(allocator_.block_table(seq).size()) * allocator_.block_size();
  }
  return s;
}

FragmentationStats SlotManager::fragmentation(SeqId seq) const {
  return fragmentation(std::span<const SeqId>(&seq, 1));
}

FragmentationStats SlotManager::fragmentation() const {
  const std::vector<SeqId> all = allocator_.sequences();
  return fragmentation(std::span<const SeqId>(all));
}

}  // namespace kvcheck
