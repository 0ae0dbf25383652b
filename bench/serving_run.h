// One configuration of the serving benchmark: a workload through the optimized engine's scheduler
// under a fixed KV memory budget, with the serving metrics of docs/design.md §11.
//
// Time. Requests arrive on a clock that is the wall time of this run, except that when the engine
// has nothing to do before the next arrival the clock jumps forward to it instead of sleeping (the
// skipped seconds are reported). A token's time is the clock when the scheduler appends it: after
// the request's prefill for its first token, after the batched decode step for the others.
//   TTFT  first token - arrival;  TPOT  (last token - first token) / (tokens - 1), per request;
//   ITL   every gap between consecutive tokens of a request (preemption stalls included).
// Throughput counts generated tokens (and completed requests) over the makespan: from time 0 to
// the last token. Generation (tg, as llama-bench's) counts the tokens the decode steps produced
// over the steps' time outside prefill (the step timers of optimized/step_timer.h, on for the run).
//
// Memory. The KV budget becomes floor(budget / page_bytes) pages. Paged configurations take pages
// as requests grow; the contiguous baseline (`contiguous`) runs full fp16 but admits a request only
// when the pages of its whole maximum length (its prompt plus its output cap, at most
// max_position_embeddings: the scheduler's reserve_tokens) fit beside the others' reservations, as
// a cache allocated contiguously per request would; a request whose reservation exceeds the whole
// pool fails with that reason at submission (counted in requests_refused and requests_failed,
// never run).
// Sampled after every step with a request running:
//   KV bytes       pages in use (contiguous: reserved) x page_bytes; the peak is reported;
//   fragmentation  1 - live slots / allocated slots (contiguous: slots of the reserved pages).
// Sampled after every decode step, for the roofline (bench/step_roofline.h): the stored slots
// (all requests, layers and kv heads) and their bytes (each tier's live slots x its bytes per
// slot), averaged over the decode steps.
//
// Every submitted request ends in exactly one result; the result carries the submitted and
// completed counts, the tokens asked for and generated, and the first errors, so a caller can
// check that nothing was lost.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bench/serving_workload.h"
#include "bench/step_roofline.h"
#include "optimized/scheduler.h"
#include "optimized/transfer_ledger.h"
#include "reference/model.h"

namespace kvcheck {

struct ServingRunConfig {
  std::string label;         // the row's name: "contiguous", "paged-fp16" or the policy spec
  std::string policy;        // the engine's policy spec
  bool contiguous = false;   // reserve each request's prompt + output cap at admission
  std::int64_t kv_budget_bytes = 0;
  std::int64_t page_bytes = 0;
  std::int64_t max_batch = 256;
  PreemptionMode preemption = PreemptionMode::kAuto;
  std::string device = "cpu";
  int threads = 0;
  // The scheduler's prefix cache (optimized/prefix_page_cache.h); reusable_prefill alone is its
  // baseline: the same prefill (ModelRunner::set_reusable_prefill), nothing reused.
  bool prefix_cache = false;
  bool reusable_prefill = false;
};

struct Percentiles {
  double p50 = 0.0, p99 = 0.0, mean = 0.0;
  std::int64_t count = 0;
};
// Nearest-rank percentiles and the mean of `values` (all zero when empty).
Percentiles percentiles(std::vector<double> values);

struct MeanSd {
  double mean = 0.0, sd = 0.0;  // sd: the sample standard deviation (n - 1), 0 for one value
};
// Of `values` (all zero when empty).
MeanSd mean_sd(std::span<const double> values);

struct ServingResult {
  std::string label, policy;
  std::int64_t requests_submitted = 0, requests_completed = 0, requests_failed = 0;
  std::int64_t requests_refused = 0;  // of the failed: refused at submission, never admitted
  std::int64_t tokens_requested = 0, output_tokens = 0;  // asked for by every request, and generated
  std::vector<std::string> errors;                      // the first failed requests' errors
  double makespan_s = 0.0, skipped_idle_s = 0.0, wall_s = 0.0;
  double output_tokens_per_s = 0.0, requests_per_s = 0.0;
  std::int64_t decode_tokens = 0;
  double generation_s = 0.0, generation_tokens_per_s = 0.0;  // decode tokens over the steps' non-prefill time
  std::int64_t steps = 0, decode_steps = 0, max_batch_seen = 0;
  double mean_batch_size = 0.0;  // decoded tokens / decode steps
  std::int64_t pool_pages = 0, page_bytes = 0, peak_kv_bytes = 0;
  Percentiles fragmentation;     // over steps
  std::int64_t preemptions_recompute = 0, preemptions_swap = 0, recomputed_tokens = 0, replayed_rows = 0,
               swapped_bytes = 0;
  Percentiles ttft_s, tpot_s, itl_s;
  int threads = 1;                     // the engine's CPU threads
  std::int64_t weight_bytes = 0;       // decode_weight_bytes of the engine's weights
  double mean_kv_slots = 0.0, mean_kv_bytes = 0.0;  // per decode step
  // Prefill and prefix reuse: prompt tokens computed, and taken from the cache instead (prefill
  // tokens saved); pages two or more running requests listed at once, at the peak; copy-on-write
  // copies; cached pages evicted.
  std::int64_t prefill_tokens = 0, prefix_hit_tokens = 0, peak_shared_pages = 0, cow_copies = 0, prefix_evictions = 0;
  // A device-resident backend's transfer ledger over the run (optimized/transfer_ledger.h:
  // bytes by direction and kind, the weights' one upload included), or none for a backend
  // without one.
  std::optional<TransferCounts> transfers;
  // Throughput over every submitted request: false when any failed or was refused (the rates
  // then cover only the rest, and are not compared).
  bool all_completed() const { return requests_failed == 0 && requests_completed == requests_submitted; }
};

// The mean decode step of `r` (its mean batch over its mean stored KV) for the roofline.
DecodeStepWork mean_decode_step_work(const ModelConfig& c, const ServingResult& r);

// Runs `requests` (prompts filled) through a fresh engine built for `config`. InputError for a
// policy or device the engine does not know, or a budget below one page.
// progress(done, total) after every step, counting finished requests.
ServingResult run_serving(const ReferenceModel& model, const ServingRunConfig& config,
                          std::span<const ServingRequest> requests,
                          const std::function<void(std::int64_t, std::int64_t)>& progress = nullptr);

}  // namespace kvcheck
