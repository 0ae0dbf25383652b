// Block allocator operation rates (optimized/block_allocator.h), fixed-format baseline: admit +
// free of a one-block sequence, fork + free of a child, copy-on-write append (fork, append into
// the shared last block, free), prefix-cache hit (admit of a fully cached 4-block prompt + free),
// and one decode step under each slot strategy at a 256-token budget.
//   build/bin/kvcheck_bench_pages --benchmark_filter=BM_Block
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "optimized/block_allocator.h"
#include "optimized/slot_strategies.h"

namespace kvcheck {
namespace {

BlockAllocatorConfig bench_config(bool prefix_cache) {
  BlockAllocatorConfig c;
  c.num_blocks = 4096;
  c.block_size = 16;
  c.prefix_cache = prefix_cache;
  return c;
}

void BM_BlockAllocateFree(benchmark::State& state) {
  BlockAllocator a(bench_config(false));
  const std::vector<std::int32_t> prompt(16, 7);
  for (auto _ : state) {
    a.admit(1, prompt);
    a.free_sequence(1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BlockAllocateFree);

void BM_BlockFork(benchmark::State& state) {
  BlockAllocator a(bench_config(false));
  const std::vector<std::int32_t> prompt(static_cast<std::size_t>(state.range(0)), 7);
  a.admit(0, prompt);
  for (auto _ : state) {
    a.fork(0, 1);
    a.free_sequence(1);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("parent tokens " + std::to_string(state.range(0)));
}
BENCHMARK(BM_BlockFork)->Arg(16)->Arg(512);

void BM_BlockCopyOnWriteAppend(benchmark::State& state) {
  BlockAllocator a(bench_config(false));
  const std::vector<std::int32_t> prompt(504, 7);  // 31.5 blocks: the last one has room
  a.admit(0, prompt);
  for (auto _ : state) {
    a.fork(0, 1);
    a.append(1, 9);  // copies exactly the shared last block
    a.free_sequence(1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BlockCopyOnWriteAppend);

void BM_BlockPrefixCacheHit(benchmark::State& state) {
  BlockAllocator a(bench_config(true));
  std::vector<std::int32_t> prompt(64);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int32_t>(i);
  a.admit(0, prompt);
  a.free_sequence(0);  // the 4 blocks stay cached (idle)
  for (auto _ : state) {
    a.admit(1, prompt);  // 4 hits, no new block
    a.free_sequence(1);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BlockPrefixCacheHit);

void BM_BlockDecodeStep(benchmark::State& state) {
  const auto strategy = static_cast<SlotStrategy>(state.range(0));
  BlockAllocator a(bench_config(false));
  SlotManager m(a, strategy);
  const std::vector<std::int32_t> prompt(256, 7);
  a.admit(0, prompt);
  std::uint64_t x = 88172645463325252ULL;
  std::vector<std::int32_t> live(256);
  for (std::int32_t i = 0; i < 256; ++i) live[static_cast<std::size_t>(i)] = i;
  for (auto _ : state) {
    if (a.next_position(0) >= 16384) {  // bounded positions (and no-op's blocks): start again
      state.PauseTiming();
      a.free_sequence(0);
      a.admit(0, prompt);
      live.resize(256);
      for (std::int32_t i = 0; i < 256; ++i) live[static_cast<std::size_t>(i)] = i;
      state.ResumeTiming();
    }
    const std::int32_t pos = a.next_position(0);
    m.append(0, pos);
    live.push_back(pos);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const std::size_t pick = static_cast<std::size_t>(x % 192);
    const std::int32_t victim = live[pick];
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    m.evict(0, victim);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(slot_strategy_name(strategy));
}
BENCHMARK(BM_BlockDecodeStep)->DenseRange(0, 3);

}  // namespace
}  // namespace kvcheck
