// The synthetic workload of `kvcheck bench --fragmentation` (SpvLLM's internal-fragmentation
// micro-benchmark, papers/001 section 3.2), on the block allocator and the four slot strategies.
//
// Workload (seeded, deterministic): `requests` requests, all arriving at once; prompt and output
// lengths drawn from lognormal distributions with means mean_prompt and mean_output (ShareGPT's
// 224.7 and 208.9 in the paper) and shape sigma, clamped to [1, max_len]. Continuous batching
// runs up to max_batch sequences at a time, admitting in request order; the pool is sized so that
// nothing is ever exhausted or preempted, so every strategy sees the same schedule, the same
// tokens and the same victims.
//
// Per request and budget: the prompt is pruned to the budget at prefill (the kept tokens are
// stored densely, as a prefill-time selection would); each decode step appends one token and,
// once the sequence holds more live tokens than the budget, evicts one victim. Victim rule:
// uniformly at random (the request's own seeded generator) among the live tokens other than the
// most recent ceil(recent_share x budget). The no-eviction baseline keeps the whole prompt and
// every token.
//
// Measured per (strategy, budget): internal fragmentation over time, 1 - live slots / allocated
// slots over the running sequences, sampled after every step (p50, p99, mean over the steps);
// sparse copies, copied slots and bytes, pre-allocated destination blocks; peak blocks in use.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "optimized/slot_strategies.h"

namespace kvcheck {

struct FragmentationWorkloadConfig {
  std::uint64_t seed = 1;
  std::int64_t requests = 1000;
  double mean_prompt = 225.0;
  double mean_output = 210.0;
  double sigma = 0.8;  // lognormal shape
  std::int64_t max_len = 2048;
  std::vector<std::int64_t> budgets = {256, 512, 1024};
  std::int64_t block_size = 16;
  std::int64_t max_batch = 64;
  double recent_share = 0.25;
};

struct WorkloadRequest {
  std::int64_t prompt = 0;
  std::int64_t output = 0;
};

// The requests of a workload (lengths only; token ids are derived from positions).
std::vector<WorkloadRequest> make_fragmentation_requests(const FragmentationWorkloadConfig& config);

struct FragmentationResult {
  std::string strategy;     // "no-eviction" or slot_strategy_name
  std::int64_t budget = 0;  // 0: no eviction
  std::int64_t steps = 0;   // fragmentation samples
  double p50 = 0.0, p99 = 0.0, mean = 0.0;
  std::int64_t evictions = 0;
  CopyStats copy;
  std::int64_t peak_blocks = 0;
  std::int64_t pool_blocks = 0;
};

// One run: `strategy` empty is the no-eviction baseline (budget ignored).
FragmentationResult simulate_fragmentation(const FragmentationWorkloadConfig& config,
                                           const std::vector<WorkloadRequest>& requests,
                                           std::optional<SlotStrategy> strategy, std::int64_t budget);

// The baseline, then every strategy at every budget. `progress(done, total)` after each run.
std::vector<FragmentationResult> run_fragmentation_bench(
    const FragmentationWorkloadConfig& config,
    const std::function<void(std::int64_t, std::int64_t)>& progress = nullptr);

}  // namespace kvcheck
