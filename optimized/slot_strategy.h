// SpvLLM's four ways of handling the slot a per-step eviction frees (papers/001), shared by the
// block baseline (optimized/slot_strategies.h) and the engine's page manager:
//   no-op       the slot is masked dead; pages / blocks are never freed before the request ends;
//   free-block  the slot is masked dead; a page whose slots are all dead returns to the pool;
//   sparse-copy the live tokens are copied densely into as few pages as they need and the rest
//               are released;
//   slot-reuse  the next token is written into a dead slot when there is one (LeanKV's unified
//               pages do this by default).
#pragma once

#include <string>

namespace kvcheck {

enum class SlotStrategy { kNoOp, kFreeBlock, kSparseCopy, kSlotReuse };

inline constexpr SlotStrategy kAllSlotStrategies[] = {SlotStrategy::kNoOp, SlotStrategy::kFreeBlock,
                                                      SlotStrategy::kSparseCopy, SlotStrategy::kSlotReuse};
std::string slot_strategy_name(SlotStrategy strategy);  // "no-op", "free-block", "sparse-copy", "slot-reuse"

}  // namespace kvcheck
