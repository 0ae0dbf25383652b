#include "bench/serving_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>

#include "optimized/engine.h"
#include "optimized/nvtx_range.h"
#include "optimized/resident_backend.h"
#include "optimized/step_timer.h"
#include "reference/errors.h"

namespace kvcheck {

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.count = static_cast<std::int64_t>(v.size());
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  const auto rank = [&](double q) {
    const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::clamp<std::size_t>(i, 1, v.size()) - 1];
  };
  p.p50 = rank(0.50);
  p.p99 = rank(0.99);
  p.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return p;
}

MeanSd mean_sd(std::span<const double> v) {
  MeanSd m;
  if (v.empty()) return m;
  const auto n = static_cast<double>(v.size());
  m.mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
  if (v.size() < 2) return m;
  double ss = 0.0;
  for (double x : v) ss += (x - m.mean) * (x - m.mean);
  m.sd = std::sqrt(ss / (n - 1.0));
  return m;
}

DecodeStepWork mean_decode_step_work(const ModelConfig& c, const ServingResult& r) {
  return decode_step_work(c, r.weight_bytes, r.mean_batch_size, r.mean_kv_slots, r.mean_kv_bytes);
}

ServingResult run_serving(const ReferenceModel& model, const ServingRunConfig& config,
                          std::span<const ServingRequest> requests,
                          const std::function<void(std::int64_t, std::int64_t)>& progress) {
  using Clock = std::chrono::steady_clock;
  const ModelConfig& c = model.config();
  if (config.page_bytes < 1) throw input_error("--page-bytes", std::to_string(config.page_bytes), "must be positive");
  if (config.kv_budget_bytes < config.page_bytes) {
    throw input_error("--kv-budget", std::to_string(config.kv_budget_bytes), "below one page of {} bytes",
                      config.page_bytes);
  }
  EngineOptions eo;
  eo.device = config.device;
  eo.policy = config.policy;
  eo.threads = config.threads;
  eo.page_bytes = config.page_bytes;
  eo.pages = config.kv_budget_bytes / config.page_bytes;
  std::unique_ptr<Engine> engine = make_engine(model, eo);
  PagedKvCache& cache = *engine->cache;

  ServingResult out;
  out.label = config.label;
  out.policy = config.policy;
  out.pool_pages = cache.pool_pages();
  out.page_bytes = config.page_bytes;
  out.threads = engine->backend->threads();
  out.weight_bytes = decode_weight_bytes(engine->weights);

  // Requests in arrival order (stable: equal arrivals keep the file's order).
  std::vector<const ServingRequest*> order;
  for (const ServingRequest& r : requests) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(),
                   [](const ServingRequest* a, const ServingRequest* b) { return a->arrival_s < b->arrival_s; });
  std::map<std::int64_t, double> arrival;
  std::map<std::int64_t, std::int64_t> asked;
  std::map<std::int64_t, std::vector<double>> token_times;

  reset_step_times();
  set_step_timing(true);
  const std::string range_name = "serving " + config.label;
  const NvtxRange range(range_name.c_str());
  const Clock::time_point t0 = Clock::now();
  double skipped = 0.0;
  const auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count() + skipped; };

  SchedulerConfig sc;
  sc.max_batch = config.max_batch;
  sc.preemption = cache.policy().swappable() ? config.preemption : PreemptionMode::kRecompute;
  if (config.contiguous) sc.reserve_tokens = c.max_position_embeddings;
  if (config.reusable_prefill || config.prefix_cache) engine->runner->set_reusable_prefill(true);
  sc.prefix_cache = config.prefix_cache;
  sc.on_token = [&](std::int64_t id, std::size_t) { token_times[id].push_back(now()); };
  Scheduler s(*engine->runner, sc);

  const std::int64_t tpp = cache.manager().pool().tokens_per_page(0);
  std::vector<double> fragmentation;
  double kv_slots_sum = 0.0, kv_bytes_sum = 0.0;
  std::int64_t kv_samples = 0;
  std::size_t next = 0;
  for (;;) {
    const double t = now();
    while (next < order.size() && order[next]->arrival_s <= t) {
      const ServingRequest& r = *order[next++];
      arrival[r.id] = r.arrival_s;
      asked[r.id] = r.output_tokens;
      s.submit({r.id, r.prompt, r.output_tokens, /*stop_at_eos=*/false, /*arrival_step=*/0});
    }
    if (s.running() == 0 && s.waiting() == 0) {
      if (next == order.size()) break;
      skipped += order[next]->arrival_s - t;  // idle until the next arrival: jump there
      continue;
    }
    const std::int64_t decode_steps = s.stats().decode_steps;
    s.step();
    const bool decoded = s.stats().decode_steps > decode_steps;
    if (s.running() > 0) {
      std::int64_t allocated_bytes = 0, allocated_slots = 0, live_slots = 0;
      const PageManagerStats st = cache.manager().stats();
      for (const TierStats& tier : st.tiers) {
        live_slots += tier.live_slots;
        allocated_slots += tier.allocated_slots;
      }
      if (decoded) {
        const StoredKv kv = stored_kv(cache);
        kv_slots_sum += kv.slots;
        kv_bytes_sum += kv.bytes;
        ++kv_samples;
      }
      if (config.contiguous) {
        allocated_bytes = s.reserved_pages() * config.page_bytes;
        allocated_slots = s.reserved_pages() * tpp;
      } else {
        allocated_bytes = (st.pool_pages - st.free_pages) * config.page_bytes;
      }
      out.peak_kv_bytes = std::max(out.peak_kv_bytes, allocated_bytes);
      if (allocated_slots > 0) {
        fragmentation.push_back(1.0 - static_cast<double>(live_slots) / static_cast<double>(allocated_slots));
      }
    }
    if (progress) {
      progress(static_cast<std::int64_t>(next) - s.running() - s.waiting(), static_cast<std::int64_t>(order.size()));
    }
  }
  out.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  set_step_timing(false);
  const StepTimes parts = step_times();
  out.generation_s = parts[StepPart::kStep] - parts[StepPart::kPrefill];
  out.skipped_idle_s = skipped;

  std::vector<double> ttft, tpot, itl;
  double last_token = 0.0;
  for (const GenerationResult& g : s.run()) {
    ++out.requests_submitted;
    out.tokens_requested += asked.at(g.id);
    out.output_tokens += static_cast<std::int64_t>(g.tokens.size());
    const auto times = token_times.find(g.id);
    if (times != token_times.end() && !times->second.empty()) {
      const std::vector<double>& ts = times->second;
      last_token = std::max(last_token, ts.back());
      ttft.push_back(ts.front() - arrival.at(g.id));
      if (ts.size() >= 2) {
        tpot.push_back((ts.back() - ts.front()) / static_cast<double>(ts.size() - 1));
        for (std::size_t i = 1; i < ts.size(); ++i) itl.push_back(ts[i] - ts[i - 1]);
      }
    }
    if (g.stop_reason == StopReason::kError) {
      ++out.requests_failed;
      if (g.admitted_step < 0) ++out.requests_refused;
      if (out.errors.size() < 5) out.errors.push_back(g.error);
      continue;
    }
    ++out.requests_completed;
  }
  const SchedulerStats& st = s.stats();
  out.makespan_s = last_token;
  out.steps = st.steps;
  out.decode_steps = st.decode_steps;
  out.max_batch_seen = st.max_batch_seen;
  out.mean_batch_size =
      st.decode_steps > 0 ? static_cast<double>(st.decode_tokens) / static_cast<double>(st.decode_steps) : 0.0;
  out.output_tokens_per_s = last_token > 0.0 ? static_cast<double>(out.output_tokens) / last_token : 0.0;
  out.decode_tokens = st.decode_tokens;
  out.generation_tokens_per_s =
      out.generation_s > 0.0 ? static_cast<double>(out.decode_tokens) / out.generation_s : 0.0;
  out.requests_per_s = last_token > 0.0 ? static_cast<double>(out.requests_completed) / last_token : 0.0;
  out.fragmentation = percentiles(std::move(fragmentation));
  if (kv_samples > 0) {
    out.mean_kv_slots = kv_slots_sum / static_cast<double>(kv_samples);
    out.mean_kv_bytes = kv_bytes_sum / static_cast<double>(kv_samples);
  }
  out.preemptions_recompute = st.preemptions_recompute;
  out.preemptions_swap = st.preemptions_swap;
  out.recomputed_tokens = st.recomputed_tokens;
  out.replayed_rows = st.replayed_rows;
  out.swapped_bytes = st.swapped_bytes;
  out.prefill_tokens = st.prefill_tokens;
  out.prefix_hit_tokens = st.prefix_hit_tokens;
  out.peak_shared_pages = st.peak_shared_pages;
  out.cow_copies = st.cow_copies;
  out.prefix_evictions = st.prefix_evictions;
  out.ttft_s = percentiles(std::move(ttft));
  out.tpot_s = percentiles(std::move(tpot));
  out.itl_s = percentiles(std::move(itl));
  if (ResidentBackend* resident = engine->backend->resident()) out.transfers = resident->ledger().total();
  return out;
}

}  // namespace kvcheck
