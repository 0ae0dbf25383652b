// CUDA version of one compaction round on the flat circular free list (kernels/cpu/compaction.h
// is the CPU twin; same arguments, same results): cub::DeviceScan::ExclusiveSum over the per-head
// counts, then one kernel that copies each head's ids from / to the list by its offsets.
//
// Host-callable: copies its host arguments to the device, runs the scan and the copy kernel and
// copies the results back, so tests can hold it against the CPU twin. Throws std::runtime_error
// without a CUDA build or without a device.
#pragma once

#include <cstdint>

#include "kernels/free_run.h"

namespace kvcheck {

CompactIdsResult compact_ids_cuda(std::int32_t* list, std::int64_t pool, FreeRun run, const std::int64_t* alloc_counts,
                                  const std::int64_t* recycle_counts, std::int64_t heads, const std::int32_t* freed,
                                  std::int32_t* allocated, std::int64_t* alloc_offsets,
                                  std::int64_t* recycle_offsets);

// Exclusive scan alone on the device (for tests and the benchmark); returns the total.
std::int64_t exclusive_scan_cuda(const std::int64_t* in, std::int64_t n, std::int64_t* out);

// Device time of one round with everything already on the device (list, counts, freed ids):
// scan + copy, mean over `iterations` (CUDA events), for bench/. The list is not restored between
// iterations: every iteration makes the same disjoint reads and writes, so each costs the same.
double time_compact_ids_cuda(std::int64_t pool, std::int64_t heads, std::int64_t max_alloc_per_head,
                             std::int64_t max_recycle_per_head, int iterations);

}  // namespace kvcheck
