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
// the last token.
//
// Memory. The KV budget becomes floor(budget / page_bytes) pages. Paged configurations take pages
// as requests grow; the contiguous baseline (`contiguous`) runs full fp16 but admits a request only
// when the pages of its whole maximum length (its prompt plus its output cap, at most
// max_position_embeddings: the scheduler's reserve_tokens) fit beside the others' reservations, as
// a cache allocated contiguously per request would; a request whose reservation exceeds the whole
// pool fails with that reason (counted in requests_failed, never run).
// Sampled after every step with a request running:
//   KV bytes       pages in use (contiguous: reserved) x page_bytes; the peak is reported;
//   fragmentation  1 - live slots / allocated slots (contiguous: slots of the reserved pages).
//
// Every submitted request ends in exactly one result; the result carries the submitted and
// completed counts, the tokens asked for and generated, and the first errors, so a caller can
// check that nothing was lost.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "bench/serving_workload.h"
#include "optimized/scheduler.h"
#include "reference/model.h"

namespace kvcheck {

struct ServingRunConfig {
  std::string label;         // the row's name: "contiguous", "paged-fp16" or the policy spec
  std::string policy;        // the engine's policy spec
  bool contiguous = false;   // reserve max_position_embeddings tokens per request at admission
  std::int64_t kv_budget_bytes = 0;
  std::int64_t page_bytes = 0;
  std::int64_t max_batch = 256;
  PreemptionMode preemption = PreemptionMode::kAuto;
  std::string device = "cpu";
  int threads = 0;
};

struct Percentiles {
  double p50 = 0.0, p99 = 0.0, mean = 0.0;
  std::int64_t count = 0;
};
// Nearest-rank percentiles and the mean of `values` (all zero when empty).
Percentiles percentiles(std::vector<double> values);

struct ServingResult {
  std::string label, policy;
  std::int64_t requests_submitted = 0, requests_completed = 0, requests_failed = 0;
  std::int64_t tokens_requested = 0, output_tokens = 0;  // asked for by every request, and generated
  std::vector<std::string> errors;                      // the first failed requests' errors
  double makespan_s = 0.0, skipped_idle_s = 0.0, wall_s = 0.0;
  double output_tokens_per_s = 0.0, requests_per_s = 0.0;
  std::int64_t steps = 0, decode_steps = 0, max_batch_seen = 0;
  double mean_batch_size = 0.0;  // decoded tokens / decode steps
  std::int64_t pool_pages = 0, page_bytes = 0, peak_kv_bytes = 0;
  Percentiles fragmentation;     // over steps
  std::int64_t preemptions_recompute = 0, preemptions_swap = 0, recomputed_tokens = 0, swapped_bytes = 0;
  Percentiles ttft_s, tpot_s, itl_s;
};

// Runs `requests` (prompts filled) through a fresh engine built for `config`. InputError for a
// policy or device the engine does not know, or a budget below one page.
// progress(done, total) after every step, counting finished requests.
ServingResult run_serving(const ReferenceModel& model, const ServingRunConfig& config,
                          std::span<const ServingRequest> requests,
                          const std::function<void(std::int64_t, std::int64_t)>& progress = nullptr);

}  // namespace kvcheck
