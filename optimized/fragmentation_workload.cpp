#include "optimized/fragmentation_workload.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "optimized/seeded_draws.h"
#include "reference/errors.h"

namespace kvcheck {

namespace {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - (q > 0 ? 1 : 0);
  return v[std::min(i, v.size() - 1)];
}

struct Running {
  std::int64_t request = 0;
  SeqId seq = 0;
  std::int64_t remaining = 0;               // tokens still to generate
  std::vector<std::int32_t> live_positions;  // ascending
  std::mt19937_64 rng;
};

}  // namespace

std::vector<WorkloadRequest> make_fragmentation_requests(const FragmentationWorkloadConfig& c) {
  if (c.requests < 1) throw input_error("--requests", std::to_string(c.requests), "must be at least 1");
  std::mt19937_64 rng(splitmix64(c.seed));
  std::vector<WorkloadRequest> out(static_cast<std::size_t>(c.requests));
  for (WorkloadRequest& r : out) {
    r.prompt = lognormal_draw(rng, c.mean_prompt, c.sigma, 1, c.max_len);
    r.output = lognormal_draw(rng, c.mean_output, c.sigma, 1, c.max_len);
  }
  return out;
}

FragmentationResult simulate_fragmentation(const FragmentationWorkloadConfig& c,
                                           const std::vector<WorkloadRequest>& requests,
                                           std::optional<SlotStrategy> strategy, std::int64_t budget) {
  const std::int64_t bs = c.block_size;
  // Enough for max_batch sequences of the longest request, plus sparse-copy destinations.
  std::int64_t longest = 1;
  for (const WorkloadRequest& r : requests) longest = std::max(longest, r.prompt + r.output);
  const std::int64_t per_seq = 2 * ((longest + bs - 1) / bs) + 2;
  BlockAllocatorConfig ac;
  ac.num_blocks = c.max_batch * per_seq;
  ac.block_size = bs;
  ac.prefix_cache = false;
  ac.poison = false;
  BlockAllocator alloc(ac);
  SlotManager mgr(alloc, strategy.value_or(SlotStrategy::kNoOp));
  const bool evicting = strategy.has_value();

  FragmentationResult res;
  res.strategy = evicting ? slot_strategy_name(*strategy) : "no-eviction";
  res.budget = evicting ? budget : 0;
  res.pool_blocks = ac.num_blocks;
  std::vector<double> samples;
  std::vector<Running> running;
  std::size_t next = 0;
  std::vector<std::int32_t> prompt;
  const auto recent = static_cast<std::int64_t>(std::ceil(c.recent_share * static_cast<double>(budget)));

  while (next < requests.size() || !running.empty()) {
    while (static_cast<std::int64_t>(running.size()) < c.max_batch && next < requests.size()) {
      const WorkloadRequest& r = requests[next];
      Running run;
      run.request = static_cast<std::int64_t>(next);
      run.seq = static_cast<SeqId>(next);
      run.remaining = r.output;
      run.rng.seed(splitmix64(c.seed ^ splitmix64(static_cast<std::uint64_t>(next) + 1)));
      const std::int64_t kept = evicting ? std::min(r.prompt, budget) : r.prompt;
      prompt.resize(static_cast<std::size_t>(kept));
      for (std::int64_t i = 0; i < kept; ++i) prompt[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
      alloc.admit(run.seq, prompt);
      run.live_positions.assign(prompt.begin(), prompt.end());
      running.push_back(std::move(run));
      ++next;
    }
    // One decode step for every running sequence.
    std::int64_t live = 0, allocated = 0;
    for (Running& run : running) {
      const std::int32_t position = alloc.next_position(run.seq);
      mgr.append(run.seq, position);
      run.live_positions.push_back(position);
      if (evicting && static_cast<std::int64_t>(run.live_positions.size()) > budget) {
        const std::int64_t candidates = std::max<std::int64_t>(1, static_cast<std::int64_t>(run.live_positions.size()) - recent);
        const auto pick = static_cast<std::size_t>(run.rng() % static_cast<std::uint64_t>(candidates));
        const std::int32_t victim = run.live_positions[pick];
        run.live_positions.erase(run.live_positions.begin() + static_cast<std::ptrdiff_t>(pick));
        mgr.evict(run.seq, victim);
        ++res.evictions;
      }
      --run.remaining;
      live += alloc.live_tokens(run.seq);
      allocated += static_cast<std::int64_t>(alloc.block_table(run.seq).size()) * bs;
    }
    samples.push_back(allocated == 0 ? 0.0 : 1.0 - static_cast<double>(live) / static_cast<double>(allocated));
    // Finished sequences leave (order kept: admission order).
    std::vector<Running> still;
    still.reserve(running.size());
    for (Running& run : running) {
      if (run.remaining > 0) {
        still.push_back(std::move(run));
      } else {
        alloc.free_sequence(run.seq);
      }
    }
    running = std::move(still);
  }
  res.steps = static_cast<std::int64_t>(samples.size());
  res.p50 = quantile(samples, 0.50);
  res.p99 = quantile(samples, 0.99);
  double sum = 0.0;
  for (const double s : samples) sum += s;
  res.mean = samples.empty() ? 0.0 : sum / static_cast<double>(samples.size());
  res.copy = mgr.copy_stats();
  res.peak_blocks = alloc.peak_used();
  return res;
}

std::vector<FragmentationResult> run_fragmentation_bench(
    const FragmentationWorkloadConfig& c, const std::function<void(std::int64_t, std::int64_t)>& progress) {
  const std::vector<WorkloadRequest> requests = make_fragmentation_requests(c);
  const auto total = static_cast<std::int64_t>(1 + c.budgets.size() * std::size(kAllSlotStrategies));
  std::vector<FragmentationResult> out;
  out.push_back(simulate_fragmentation(c, requests, std::nullopt, 0));
  if (progress) progress(1, total);
  for (const std::int64_t budget : c.budgets) {
    for (const SlotStrategy s : kAllSlotStrategies) {
      out.push_back(simulate_fragmentation(c, requests, s, budget));
      if (progress) progress(static_cast<std::int64_t>(out.size()), total);
    }
  }
  return out;
}

}  // namespace kvcheck
