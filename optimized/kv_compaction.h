// Parallel KV compaction (LeanKV section 5.2; docs/design.md §6): one round moves
// pages between the circular free list and many heads' page tables at once.
//
//   planning      each head computes how many pages it must allocate and how many it frees
//                 (plan_head below), independently (in parallel);
//   coordination  an EXCLUSIVE prefix sum over the per-head counts (kernels/cpu/exclusive_scan.h)
//                 gives head h its offset from the start pointer (allocation) and from the end
//                 pointer (recycling); exhaustion is checked for the whole round before anything
//                 changes (PoolExhausted); heads copy their ids in parallel, each in its own
//                 disjoint range; both pointers advance once.
//
// The sequential version LeanKV compares against runs the same plan head by head, allocating
// and recycling through the list one head at a time. Both give the same ids to the same heads and
// leave the same free run (the properties check it against oracles/page_manager_model.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "optimized/free_page_list.h"

namespace kvcheck {

enum class CompactionMode { kParallel, kSequential };

struct CompactionOptions {
  CompactionMode mode = CompactionMode::kParallel;
  int threads = 0;                   // 0: std::thread::hardware_concurrency()
  std::int64_t min_parallel = 1024;  // fewer heads than this run on the calling thread
  int resolved_threads() const;
};

// ---- planning -----------------------------------------------------------------------------
std::int64_t pages_for(std::int64_t tokens, std::int64_t tokens_per_page);  // ceil; 0 for 0 tokens

// What one tier of one head must hold against what it has.
struct TierDemand {
  std::int64_t tokens = 0;           // tokens the tier must hold
  std::int64_t pages_held = 0;       // pages it has
  std::int64_t tokens_per_page = 1;
};
struct HeadPlan {
  std::int64_t allocate = 0;
  std::int64_t recycle = 0;
  bool operator==(const HeadPlan&) const = default;
};
// Pages to allocate and to free for one head. With `convertible` (the prompt phase: the held pages
// carry no tokens yet, so a held page can be re-formatted for any tier) the held pages of all tiers
// are pooled: allocate max(0, need - held), recycle max(0, held - need), totals over the tiers.
// Otherwise each tier separately: allocate sum max(0, need_t - held_t), recycle sum max(0, held_t - need_t).
HeadPlan plan_head(std::span<const TierDemand> tiers, bool convertible);

// Runs `body(h)` for every head: in parallel chunks (kParallel) or in order (kSequential).
void for_each_head(std::int64_t heads, const CompactionOptions& options, const std::function<void(std::int64_t)>& body);

// ---- coordination -------------------------------------------------------------------------
struct CompactionRoundStats {
  std::int64_t heads = 0;
  std::int64_t allocated = 0;  // ids taken from the list
  std::int64_t recycled = 0;   // ids written back
  double seconds = 0.0;        // coordination and copy (planning excluded)
};

// apply(h, alloc_position, recycle_position): head h reads its allocate[h] new ids at
// list.id_at(alloc_position + i) and writes its recycle[h] freed ids with
// list.put_at(recycle_position + j, id). It is called for every head, also those with nothing to
// allocate or recycle, and must touch only its own head's state.
using ApplyHead = std::function<void(std::int64_t head, std::int64_t alloc_position, std::int64_t recycle_position)>;

// One round. Throws PoolExhausted, with nothing changed and apply never called, when the round
// needs more ids than are free (checked against the free count before the round: ids recycled in
// a round are not reused in it).
CompactionRoundStats compaction_round(FreePageList& list, std::span<const std::int64_t> allocate,
                                      std::span<const std::int64_t> recycle, const CompactionOptions& options,
                                      const ApplyHead& apply);

}  // namespace kvcheck
