// Planning and coordination of parallel KV compaction.
#include "optimized/kv_compaction.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "kernels/cpu/exclusive_scan.h"
#include "kernels/cpu/parallel_for.h"
#include "optimized/pool_exhausted.h"

namespace kvcheck {

int CompactionOptions::resolved_threads() const {
  if (threads > 0) return threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::int64_t pages_for(std::int64_t tokens, std::int64_t tokens_per_page) {
  if (tokens_per_page <= 0) throw std::invalid_argument("pages_for: tokens_per_page must be positive");
  return (tokens + tokens_per_page - 1) / tokens_per_page;
}

HeadPlan plan_head(std::span<const TierDemand> tiers, bool convertible) {
  HeadPlan p;
  std::int64_t need = 0, held = 0;
  for (const TierDemand& t : tiers) {
    const std::int64_t n = pages_for(t.tokens, t.tokens_per_page);
    need += n;
    held += t.pages_held;
    p.allocate += std::max<std::int64_t>(0, n - t.pages_held);
    p.recycle += std::max<std::int64_t>(0, t.pages_held - n);
  }
  if (convertible) {
    p.allocate = std::max<std::int64_t>(0, need - held);
    p.recycle = std::max<std::int64_t>(0, held - need);
  }
  return p;
}

void for_each_head(std::int64_t heads, const CompactionOptions& options, const std::function<void(std::int64_t)>& body) {
  if (options.mode == CompactionMode::kSequential) {
    for (std::int64_t h = 0; h < heads; ++h) body(h);
    return;
  }
  parallel_for(heads, options.resolved_threads(), options.min_parallel, body);
}

CompactionRoundStats compaction_round(FreePageList& list, std::span<const std::int64_t> allocate,
                                      std::span<const std::int64_t> recycle, const CompactionOptions& options,
                                      const ApplyHead& apply) {
  if (allocate.size() != recycle.size()) throw std::invalid_argument("compaction_round: allocate and recycle differ in length");
  const auto t0 = std::chrono::steady_clock::now();
  CompactionRoundStats s;
  s.heads = static_cast<std::int64_t>(allocate.size());
  if (options.mode == CompactionMode::kSequential) {
    // Heads one by one: a running total, then each head allocates and recycles through the list.
    for (std::int64_t a : allocate) s.allocated += a;
    for (std::int64_t r : recycle) s.recycled += r;
    if (s.allocated > list.free_count()) throw PoolExhausted("compaction round", s.allocated, list.free_count());
    for (std::size_t h = 0; h < allocate.size(); ++h) {
      apply(static_cast<std::int64_t>(h), list.start_position(), list.end_position());
      list.commit(allocate[h], recycle[h]);
    }
  } else {
    const int threads = options.resolved_threads();
    std::vector<std::int64_t> alloc_offset(allocate.size()), recycle_offset(recycle.size());
    s.allocated = kvcheck::exclusive_scan(allocate, alloc_offset, threads, options.min_parallel);
    s.recycled = kvcheck::exclusive_scan(recycle, recycle_offset, threads, options.min_parallel);
    const std::int64_t start = list.reserve_allocation(s.allocated);  // PoolExhausted, nothing changed
    const std::int64_t end = list.end_position();
    parallel_for(s.heads, threads, options.min_parallel, [&](std::int64_t h) {
      const auto k = static_cast<std::size_t>(h);
      apply(h, start + alloc_offset[k], end + recycle_offset[k]);
    });
    list.commit(s.allocated, s.recycled);
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace kvcheck
