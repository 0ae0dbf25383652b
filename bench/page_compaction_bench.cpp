// Parallel KV compaction vs the sequential version, in the same run (LeanKV section 5.2 and
// figure 11): 128 requests x 32 layers x 8 kv-heads = 32,768 heads per step, 16 KiB pages,
// head_dim 128, LeanKV's K8V4 / K4V2 tiers. The pool keeps metadata only (owners, live masks,
// tables and the free list; backing = false), since the bytes of a pool this size would not fit.
//
//   BM_PromptPhase      one prompt phase for all 128 requests (512-token prompts, random
//                       per-head tier counts): conservative allocation, planning, recycling;
//   BM_DecodeStep       one generation step for every head (append; a third evict, a third demote);
//   BM_CompactionRound  the coordination alone (scan, exhaustion check, id copy, commit) of a
//                       round where each head allocates 0-1 ids and recycles 0-2;
//   BM_CompactionRoundGpu  the CUDA scan + copy of the same round (registered only with a device).
// Counters: compaction_ms (coordination and copy per step), ids_per_step, heads.
//   build/bin/kvcheck_bench_pages --benchmark_filter='Prompt|Decode|CompactionRound'
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "kernels/compaction_cuda.h"
#include "kernels/cpu/exclusive_scan.h"
#include "kernels/device.h"
#include "optimized/kv_compaction.h"
#include "optimized/unified_page_manager.h"

namespace kvcheck {
namespace {

constexpr std::int64_t kRequests = 128;
constexpr std::int64_t kLayers = 32;
constexpr std::int64_t kKvHeads = 8;
constexpr std::int64_t kHeads = kRequests * kLayers * kKvHeads;
constexpr std::int64_t kPromptLen = 512;

CompactionMode mode_of(const benchmark::State& state) {
  return state.range(0) == 0 ? CompactionMode::kParallel : CompactionMode::kSequential;
}

PageManagerConfig bench_config(CompactionMode mode) {
  PageManagerConfig c;
  c.pool.pages = 600000;
  c.pool.page_bytes = 16 * 1024;
  c.pool.head_dim = 128;
  c.pool.backing = false;
  c.layers = kLayers;
  c.kv_heads = kKvHeads;
  c.max_seq_len = 4096;
  c.compaction.mode = mode;
  return c;
}

std::vector<PromptRequest> prompt_batch(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<PromptRequest> batch;
  for (std::int64_t r = 0; r < kRequests; ++r) {
    PromptRequest p{r, kPromptLen, {}};
    for (std::int64_t h = 0; h < kLayers * kKvHeads; ++h) {
      const auto high = static_cast<std::int64_t>(1 + rng() % (kPromptLen / 2));
      const auto low = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(kPromptLen - high + 1));
      p.heads.push_back({high, low, {}, {}});
    }
    batch.push_back(std::move(p));
  }
  return batch;
}

void report(benchmark::State& state, double compaction_seconds, std::int64_t ids, std::int64_t steps) {
  state.counters["compaction_ms"] = 1e3 * compaction_seconds / static_cast<double>(steps);
  state.counters["ids_per_step"] = static_cast<double>(ids) / static_cast<double>(steps);
  state.counters["heads"] = static_cast<double>(kHeads);
  state.SetLabel(mode_of(state) == CompactionMode::kParallel ? "parallel" : "sequential");
}

void BM_PromptPhase(benchmark::State& state) {
  UnifiedPageManager m(bench_config(mode_of(state)));
  const std::vector<PromptRequest> batch = prompt_batch(1);
  std::int64_t steps = 0, ids = 0;
  double seconds = 0.0;
  for (auto _ : state) {
    state.PauseTiming();
    for (std::int64_t r = 0; r < kRequests; ++r) m.admit(r);
    const PageManagerStats before = m.stats();
    state.ResumeTiming();
    m.prompt_phase(batch);
    state.PauseTiming();
    const PageManagerStats after = m.stats();  // the two prompt rounds only, not the finishes
    seconds += after.compaction_seconds - before.compaction_seconds;
    ids += after.ids_copied - before.ids_copied;
    for (std::int64_t r = 0; r < kRequests; ++r) m.finish(r);
    state.ResumeTiming();
    ++steps;
  }
  report(state, seconds, ids, steps);
}

void BM_DecodeStep(benchmark::State& state) {
  UnifiedPageManager m(bench_config(mode_of(state)));
  for (std::int64_t r = 0; r < kRequests; ++r) m.admit(r);
  m.prompt_phase(prompt_batch(2));
  const PageManagerStats before = m.stats();
  std::vector<DecodeHead> ops;
  for (std::int64_t r = 0; r < kRequests; ++r) {
    for (std::int32_t l = 0; l < kLayers; ++l) {
      for (std::int32_t h = 0; h < kKvHeads; ++h) {
        DecodeHead op{HeadKey{r, l, h}, {static_cast<std::int32_t>(kPromptLen), 0.0f}, {}};
        const auto k = static_cast<std::int64_t>(ops.size());
        // Live token 0 is high page 0, slot 0, which the new token takes again.
        if (k % 3 == 0) op.decision.evict = 0;
        if (k % 3 == 1) op.decision.demote = 0;
        ops.push_back(op);
      }
    }
  }
  std::int64_t steps = 0;
  for (auto _ : state) {
    m.decode_step(ops);
    for (DecodeHead& op : ops) op.token.position += 1;
    ++steps;
  }
  const PageManagerStats s = m.stats();
  report(state, s.compaction_seconds - before.compaction_seconds, s.ids_copied - before.ids_copied, steps);
  state.counters["fragmentation"] = s.internal_fragmentation;
}

void BM_CompactionRound(benchmark::State& state) {
  std::mt19937_64 rng(3);
  std::vector<std::int64_t> alloc(kHeads), recycle(kHeads);
  std::int64_t total_recycle = 0;
  for (std::int64_t h = 0; h < kHeads; ++h) {
    alloc[static_cast<std::size_t>(h)] = static_cast<std::int64_t>(rng() % 2);
    recycle[static_cast<std::size_t>(h)] = static_cast<std::int64_t>(rng() % 3);
    total_recycle += recycle[static_cast<std::size_t>(h)];
  }
  CompactionOptions o;
  o.mode = mode_of(state);
  FreePageList base(4 * kHeads);
  const std::vector<PageId> used = base.allocate(total_recycle);  // ids the heads give back
  std::vector<std::int64_t> recycle_base(kHeads);
  kvcheck::exclusive_scan(recycle, recycle_base);
  std::vector<PageId> got(kHeads);
  double seconds = 0.0;
  std::int64_t ids = 0, steps = 0;
  for (auto _ : state) {
    state.PauseTiming();
    FreePageList list = base;  // the same starting state every round
    state.ResumeTiming();
    const CompactionRoundStats s = compaction_round(list, alloc, recycle, o, [&](std::int64_t h, std::int64_t a, std::int64_t r) {
      const auto k = static_cast<std::size_t>(h);
      if (alloc[k] > 0) got[k] = list.id_at(a);
      for (std::int64_t j = 0; j < recycle[k]; ++j) list.put_at(r + j, used[static_cast<std::size_t>(recycle_base[k] + j)]);
    });
    benchmark::DoNotOptimize(got.data());
    seconds += s.seconds;
    ids += s.allocated + s.recycled;
    ++steps;
  }
  report(state, seconds, ids, steps);
}

void BM_CompactionRoundGpu(benchmark::State& state) {
  double seconds = 0.0;
  for (auto _ : state) {
    const double t = time_compact_ids_cuda(8 * kHeads, kHeads, 1, 2, 20);
    state.SetIterationTime(t);
    seconds += t;
  }
  state.counters["compaction_ms"] = 1e3 * seconds / static_cast<double>(state.iterations());
  state.counters["heads"] = static_cast<double>(kHeads);
}

BENCHMARK(BM_PromptPhase)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_DecodeStep)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(50);
BENCHMARK(BM_CompactionRound)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

const bool kGpuRegistered = [] {
  if (cuda_device_count() > 0) {
    benchmark::RegisterBenchmark("BM_CompactionRoundGpu", BM_CompactionRoundGpu)
        ->Iterations(50)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace
}  // namespace kvcheck
