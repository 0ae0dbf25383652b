// SpvLLM (papers/001): H2O's per-step eviction inside a paged cache, with one of the four ways of
// handling the slots it frees (optimized/step_decision.h). The tokens kept are exactly H2O's, so
// the accuracy is H2O's; what differs is the memory the cache holds for them: pages that
// no-op never frees, the holes free-block leaves until a page empties, sparse-copy's dense
// repacking after each eviction, slot-reuse's recycled slots. Every kept token is in fp16.
#pragma once

#include <cstdint>
#include <memory>

#include "optimized/kv_policy.h"

namespace kvcheck {

std::unique_ptr<KvPolicy> make_spvllm_policy(std::int64_t budget, double recent, SlotStrategy strategy);

// Registry entry (optimized/policy_registry.h).
PolicyEntry spvllm_policy_entry();

}  // namespace kvcheck
