// What one decode step does to a head besides appending the new token at high: the decision a
// policy takes (KvPolicy::decide_step) and the page manager carries out
// (UnifiedPageManager::decode_step), one type from the one to the other; and what happens to the
// slot an eviction frees (SpvLLM's strategies, papers/001; also the block baseline's,
// optimized/slot_strategies.h):
//   no-op       the slot is masked dead; pages / blocks are never freed before the request ends;
//   free-block  the slot is masked dead; a page whose slots are all dead returns to the pool;
//   sparse-copy the live tokens are copied densely into as few pages as they need and the rest
//               are released;
//   slot-reuse  the next token is written into a dead slot when there is one (LeanKV's unified
//               pages do this by default).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace kvcheck {

// Indices into the head's live tokens in walk order (high pages in table order, then low pages;
// slot order within a page), as PagedKvCache::live_tokens lists them before the step.
struct StepDecision {
  std::optional<std::size_t> evict;   // a live token to drop
  std::optional<std::size_t> demote;  // a live high token to move to the low tier
  bool flush = false;                 // residual policies: every high token moves to the low tier
  bool operator==(const StepDecision&) const = default;
};

enum class SlotStrategy { kNoOp, kFreeBlock, kSparseCopy, kSlotReuse };

inline constexpr SlotStrategy kAllSlotStrategies[] = {SlotStrategy::kNoOp, SlotStrategy::kFreeBlock,
                                                      SlotStrategy::kSparseCopy, SlotStrategy::kSlotReuse};
// "no-op", "free-block", "sparse-copy", "slot-reuse"
inline std::string slot_strategy_name(SlotStrategy strategy) {
  switch (strategy) {
    case SlotStrategy::kNoOp: return "no-op";
    case SlotStrategy::kFreeBlock: return "free-block";
    case SlotStrategy::kSparseCopy: return "sparse-copy";
    case SlotStrategy::kSlotReuse: return "slot-reuse";
  }
  return "unknown";
}

}  // namespace kvcheck
