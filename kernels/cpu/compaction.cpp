// CPU twin of the flat compaction round.
#include "kernels/cpu/compaction.h"

#include <span>
#include <stdexcept>
#include <string>

#include "kernels/cpu/exclusive_scan.h"
#include "kernels/cpu/parallel_for.h"

namespace kvcheck {

void check_recycled_in_use(std::int64_t total_recycled, std::int64_t pool, FreeRun run, const char* what) {
  if (total_recycled > pool - run.free_count) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(total_recycled) +
                                " recycled ids but only " + std::to_string(pool - run.free_count) + " of the pool's " +
                                std::to_string(pool) + " are in use");
  }
}

CompactIdsResult compact_ids(std::int32_t* list, std::int64_t pool, FreeRun run, const std::int64_t* alloc_counts,
                             const std::int64_t* recycle_counts, std::int64_t heads, const std::int32_t* freed,
                             std::int32_t* allocated, std::int64_t* alloc_offsets, std::int64_t* recycle_offsets,
                             int threads) {
  if (pool <= 0 || heads < 0) throw std::invalid_argument("compact_ids: pool must be positive and heads >= 0");
  const auto n = static_cast<std::size_t>(heads);
  CompactIdsResult r;
  r.run = run;
  r.total_allocated = kvcheck::exclusive_scan({alloc_counts, n}, {alloc_offsets, n}, threads);
  r.total_recycled = kvcheck::exclusive_scan({recycle_counts, n}, {recycle_offsets, n}, threads);
  check_recycled_in_use(r.total_recycled, pool, run, "compact_ids");
  if (r.total_allocated > run.free_count || run.free_count - r.total_allocated + r.total_recycled > pool) return r;
  auto wrap = [pool](std::int64_t p) { return static_cast<std::size_t>(p % pool); };
  const std::int64_t end = run.start + run.free_count;
  parallel_for(heads, threads, 1024, [&](std::int64_t h) {
    const std::int64_t a = alloc_offsets[h];
    for (std::int64_t i = 0; i < alloc_counts[h]; ++i) allocated[a + i] = list[wrap(run.start + a + i)];
    const std::int64_t f = recycle_offsets[h];
    for (std::int64_t j = 0; j < recycle_counts[h]; ++j) list[wrap(end + f + j)] = freed[f + j];
  });
  r.run.start = static_cast<std::int64_t>(wrap(run.start + r.total_allocated));
  r.run.free_count = run.free_count - r.total_allocated + r.total_recycled;
  r.ok = true;
  return r;
}

}  // namespace kvcheck
