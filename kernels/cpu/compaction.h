// The coordination step of one parallel KV compaction round on a flat circular free list
// (docs/design.md §6; LeanKV section 5.2), as the CPU twin of kernels/cuda/compaction.cu.
//
// The list is an array of every page id of a pool of `pool` pages; the free ids are the circular
// run list[start .. start + free_count) (indices modulo pool). Head h asks for alloc_counts[h]
// new ids and returns recycle_counts[h] ids. An exclusive prefix sum over each count vector gives
// head h its offset: it takes the ids at start + alloc_offsets[h] + i and writes its freed ids at
// end + recycle_offsets[h] + j (end = start + free_count); then both pointers advance by the totals.
// The allocated region [start, start + A) lies in the free run and the recycled region
// [end, end + R) in the used region, so no head's reads and writes meet another's.
//
// optimized/kv_compaction.h runs the same protocol with per-head callbacks into page tables; this
// flat form is what the GPU runs and what the GPU test holds against the CPU.
#pragma once

#include <cstdint>

#include "kernels/free_run.h"

namespace kvcheck {

// list: [pool] (updated in place); alloc_counts, recycle_counts: [heads];
// freed: the recycled ids, head after head ([sum recycle_counts]);
// allocated: out, the allocated ids head after head ([sum alloc_counts]);
// alloc_offsets, recycle_offsets: out, [heads], the exclusive scans of the counts.
// Raw pointers (nvcc compiles callers of the CUDA twin's header as C++17).
// A round may recycle at most the pool - free_count ids in use: more would write past the used
// region onto the ids being allocated. That is a caller's bug: std::invalid_argument.
CompactIdsResult compact_ids(std::int32_t* list, std::int64_t pool, FreeRun run, const std::int64_t* alloc_counts,
                             const std::int64_t* recycle_counts, std::int64_t heads, const std::int32_t* freed,
                             std::int32_t* allocated, std::int64_t* alloc_offsets, std::int64_t* recycle_offsets,
                             int threads = 1);

// Throws std::invalid_argument, naming `what`, when total_recycled exceeds the ids in use.
void check_recycled_in_use(std::int64_t total_recycled, std::int64_t pool, FreeRun run, const char* what);

}  // namespace kvcheck
