#include "optimized/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "optimized/greedy_decoding.h"
#include "optimized/nvtx_range.h"
#include "optimized/pool_exhausted.h"
#include "optimized/request_error.h"
#include "optimized/sampling.h"
#include "optimized/step_timer.h"
#include "reference/errors.h"

namespace kvcheck {

PreemptionMode parse_preemption_mode(const std::string& name) {
  if (name == "recompute") return PreemptionMode::kRecompute;
  if (name == "swap") return PreemptionMode::kSwap;
  if (name == "auto") return PreemptionMode::kAuto;
  throw InputError(fmt::format("preemption mode '{}': expected recompute, swap or auto", name));
}

std::string preemption_mode_name(PreemptionMode mode) {
  switch (mode) {
    case PreemptionMode::kRecompute: return "recompute";
    case PreemptionMode::kSwap: return "swap";
    case PreemptionMode::kAuto: return "auto";
  }
  return "?";
}

Scheduler::Scheduler(ModelRunner& runner, SchedulerConfig config)
    : runner_(runner), cache_(runner.cache()), config_(std::move(config)) {
  if (config_.max_batch < 1) throw InputError("scheduler: max_batch must be at least 1");
  if (!(config_.high_watermark > 0.0 && config_.high_watermark <= 1.0)) {
    throw InputError(fmt::format("scheduler: high_watermark must be in (0, 1], got {}", config_.high_watermark));
  }
  if (config_.reserve_tokens < 0) {
    throw InputError(fmt::format("scheduler: reserve_tokens must be 0 (paging) or positive, got {}",
                                 config_.reserve_tokens));
  }
  if (!(config_.recompute_flops_per_swap_byte >= 0.0)) {
    throw InputError(fmt::format("scheduler: recompute_flops_per_swap_byte must be >= 0, got {}",
                                 config_.recompute_flops_per_swap_byte));
  }
  for (const EngineLayer& layer : runner_.weights().layers) {
    for (const DenseWeight* w : {&layer.q, &layer.k, &layer.v, &layer.o, &layer.gate, &layer.up, &layer.down}) {
      flops_per_context_token_ += 2.0 * static_cast<double>(w->out()) * static_cast<double>(w->in());
    }
  }
  if (config_.preemption == PreemptionMode::kSwap && !cache_.policy().swappable()) {
    throw InputError(fmt::format("scheduler: preemption by swap needs a policy that keeps every token in one tier "
                                 "(policy {} does not); use recompute or auto", cache_.policy().name()));
  }
  if (config_.prefix_cache) {
    if (config_.reserve_tokens > 0) {
      throw InputError("scheduler: the prefix cache shares pages, which needs paging (reserve_tokens 0)");
    }
    runner_.set_reusable_prefill(true);  // InputError naming a policy that is not prefix-closed
    prefix_.emplace(cache_, config_.prefix_cache_hash_bits);
  }
}

void Scheduler::drop_prefix(Running& r) {
  if (prefix_ && !r.prefix_chain.empty()) prefix_->unpin(r.prefix_chain);
  r.prefix_chain.clear();
}

bool Scheduler::evict_cached() {
  if (!prefix_ || !prefix_->evict_one()) return false;
  ++stats_.prefix_evictions;
  return true;
}

void Scheduler::log(const std::string& line) const {
  if (config_.log) config_.log(fmt::format("step {}: {}", step_, line));
}

std::int64_t Scheduler::reserved_pages() const {
  std::int64_t pages = 0;  // each is 0 when paging
  for (const Running& r : running_) pages += r.reserved_pages;
  return pages;
}

std::int64_t Scheduler::live(const Queued& r) {
  return std::count_if(r.seqs.begin(), r.seqs.end(), [](const Sequence& q) { return !q.done; });
}

std::int64_t Scheduler::running_sequences() const {
  std::int64_t n = 0;
  for (const Running& r : running_) n += live(r);
  return n;
}

std::int64_t Scheduler::pages_needed(const Queued& r) const {
  // Sequences after the first share the prompt's whole pages (a partly filled last page is
  // copied on their first write, so it counts for each).
  const std::int64_t tpp = cache_.manager().pool().tokens_per_page(kHighTier);
  const std::int64_t shared =
      cache_.manager().heads_per_request() * (static_cast<std::int64_t>(r.request.prompt.size()) / tpp);
  std::int64_t need = 0;
  bool first = true;
  for (const Sequence& q : r.seqs) {
    if (q.done) continue;
    need += cache_.request_pages(context(r, q) + 1) - (first ? 0 : shared);
    first = false;
  }
  return need;
}

void Scheduler::release_sequences(Queued& r, bool preempted) {
  for (const Sequence& q : r.seqs) {
    if (q.done || !cache_.has(q.id)) continue;
    if (preempted) {
      cache_.preempt(q.id);
    } else {
      cache_.release(q.id);
    }
  }
}

std::int32_t Scheduler::next_token(const Queued& r, const Sequence& q, std::span<const float> logits,
                                   std::int64_t position) const {
  return sample_token(r.request.id, logits, position,
                      SamplingParams{r.request.temperature, r.request.top_p, r.request.seed}, q.sample);
}

std::int64_t Scheduler::reservation_tokens(const GenerationRequest& request) const {
  const auto prompt = static_cast<std::int64_t>(request.prompt.size());
  const std::int64_t cap = std::max<std::int64_t>(request.max_new_tokens, 0);
  return cap > config_.reserve_tokens - prompt ? config_.reserve_tokens : prompt + cap;  // no overflow
}

void Scheduler::append_token(Queued& r, Sequence& q, std::int32_t token) {
  q.tokens.push_back(token);
  if (config_.on_token) config_.on_token(r.request.id, q.tokens.size());
}

void Scheduler::submit(GenerationRequest request) {
  if (results_.contains(request.id)) throw InputError(fmt::format("request {}: id submitted twice", request.id));
  if (PrefixPageCache::is_holder(request.id)) {
    throw InputError(fmt::format("request {}: ids below -2^62 are the prefix cache's own", request.id));
  }
  const ModelConfig& c = runner_.weights().config;
  Queued r;
  r.result.id = request.id;
  r.request = std::move(request);
  order_.push_back(r.request.id);
  results_[r.result.id].id = r.result.id;  // a place, filled by record() when the request ends
  const auto prompt = static_cast<std::int64_t>(r.request.prompt.size());
  const std::int64_t reservation = config_.reserve_tokens > 0 ? reservation_tokens(r.request) : 0;
  // What can never run is answered now, with the reason, instead of waiting forever.
  std::string error;
  if (prompt == 0) {
    error = "empty prompt";
  } else if (prompt > c.max_position_embeddings) {
    error = fmt::format("prompt of {} tokens exceeds max_position_embeddings {}", prompt, c.max_position_embeddings);
  } else if (const auto bad = std::find_if(r.request.prompt.begin(), r.request.prompt.end(),
                                          [&](std::int32_t t) { return t < 0 || t >= c.vocab_size; });
             bad != r.request.prompt.end()) {
    // Checked here, not only at prefill: a request that never runs a forward (max_new_tokens 0,
    // or cancelled while queued) must not end well with tokens the model does not have.
    error = fmt::format("token {} at position {} is outside the vocabulary [0, {})", *bad,
                        bad - r.request.prompt.begin(), c.vocab_size);
  } else if (cache_.request_pages(prompt) > cache_.pool_pages()) {
    error = fmt::format("prompt of {} tokens needs {} pages, the pool has {}", prompt, cache_.request_pages(prompt),
                        cache_.pool_pages());
  } else if (r.request.n < 1 || r.request.n > 256) {
    error = fmt::format("n = {} samples: expected 1 to 256", r.request.n);
  } else if (r.request.n > 1 && !cache_.policy().prefix_closed()) {
    error = fmt::format("n = {} samples share the prompt's pages, which needs a prefix-closed policy; {} is not",
                        r.request.n, cache_.policy().name());
  } else if (!(r.request.temperature >= 0.0) || !std::isfinite(r.request.temperature)) {
    error = fmt::format("temperature {}: expected a finite value >= 0", r.request.temperature);
  } else if (!(r.request.top_p > 0.0 && r.request.top_p <= 1.0)) {
    error = fmt::format("top_p {}: expected a value in (0, 1]", r.request.top_p);
  } else if (r.request.first_sample < 0) {
    error = fmt::format("first_sample {}: expected >= 0", r.request.first_sample);
  } else if (reservation > 0 && cache_.request_pages(reservation) * r.request.n > cache_.pool_pages()) {
    // Each sample reserves its own maximum length: a group whose reservations together exceed
    // the pool could never be admitted.
    error = fmt::format("a contiguous reservation of {} tokens (prompt {} + output cap {}, at most {}){} needs {} "
                        "pages, the pool has {}",
                        reservation, prompt, r.request.max_new_tokens, config_.reserve_tokens,
                        r.request.n > 1 ? fmt::format(" for each of {} samples", r.request.n) : std::string(),
                        cache_.request_pages(reservation) * r.request.n, cache_.pool_pages());
  }
  if (!error.empty()) {
    fail(r, error);
    return;
  }
  for (std::int64_t k = 0; k < r.request.n; ++k) {
    r.seqs.push_back(Sequence{k == 0 ? r.request.id : next_fork_id_--, r.request.first_sample + k, {}, std::nullopt});
  }
  waiting_.push_back(std::move(r));
}

std::optional<StopReason> Scheduler::stop_reason(const Queued& r, const Sequence& q) const {
  return greedy_stop(runner_.weights().config, static_cast<std::int64_t>(r.request.prompt.size()), q.tokens,
                     r.request.max_new_tokens, r.request.stop_at_eos);
}

void Scheduler::finish(Queued& r, std::optional<StopReason> live_reason) {
  release_sequences(r, false);
  std::vector<StopReason> reasons;
  for (const Sequence& q : r.seqs) reasons.push_back(q.done ? *q.done : live_reason.value());
  const StopReason stop = live_reason == StopReason::kCancelled ? StopReason::kCancelled : reasons.front();
  record(r, stop, reasons);
}

void Scheduler::finish_running(Running& r, std::optional<StopReason> live_reason) {
  drop_prefix(r);
  finish(r, live_reason);
}

// A request's result, once it has ended.
void Scheduler::record(Queued& r, StopReason stop, const std::vector<StopReason>& sample_reasons) {
  r.result.tokens = r.seqs.empty() ? std::vector<std::int32_t>{} : r.seqs.front().tokens;
  r.result.stop_reason = stop;
  if (r.seqs.size() > 1) {
    r.result.samples.clear();
    for (const Sequence& q : r.seqs) r.result.samples.push_back(q.tokens);
    r.result.sample_stop_reasons = sample_reasons;
  }
  r.result.finished_step = step_;
  results_[r.request.id] = r.result;
}

void Scheduler::finish_sequence(Running& r, Sequence& q, StopReason reason) {
  q.done = reason;
  cache_.release(q.id);  // a page another sample still lists only drops its count
  if (live(r) == 0) finish_running(r, std::nullopt);
}

void Scheduler::fail(Queued& r, const std::string& error) {
  release_sequences(r, false);
  // Errors from the engine (RequestInputError, InputError) already name the request.
  const std::string name = fmt::format("request {}: ", r.request.id);
  r.result.error = error.starts_with(name) ? error : name + error;
  log(r.result.error);
  record(r, StopReason::kError, std::vector<StopReason>(r.seqs.size(), StopReason::kError));
}

void Scheduler::fail_running(Running& r, const std::string& error) {
  drop_prefix(r);
  fail(r, error);
}

void Scheduler::start(Running& r, const PrefixPageCache::Hit& hit) {
  if (r.swapped) {
    const NvtxRange range("swap");
    cache_.swap_in(r.seqs.front().id, *r.swapped);
    stats_.swapped_bytes += r.swapped->bytes();
    swap_held_bytes_ -= r.swapped->bytes();
    r.swapped.reset();
    return;
  }
  const ModelConfig& c = runner_.weights().config;
  const std::span<const std::int32_t> prompt(r.request.prompt);
  const auto prompt_tokens = static_cast<std::int64_t>(prompt.size());
  std::vector<Sequence*> seqs;  // the live ones; the first prefills, the others share its prompt pages
  for (Sequence& q : r.seqs) {
    if (!q.done) seqs.push_back(&q);
  }
  const std::int64_t lead = seqs.front()->id;
  std::vector<float> logits;
  if (prefix_) {
    if (hit.chain.empty()) {
      logits = runner_.prefill(lead, prompt);
    } else {
      cache_.reserve_prompt_after_prefix(prefix_->holder(hit.chain.back()), lead, hit.tokens(), prompt_tokens);
      logits = runner_.prefill_after_prefix(lead, prompt, hit.tokens());  // releases the request if it throws
      stats_.prefix_hit_tokens += hit.tokens();
    }
    stats_.prefill_tokens += prompt_tokens - hit.tokens();
    prefix_->pin(hit.chain);
    r.prefix_chain = prefix_->insert(lead, prompt, hit);
  } else {
    logits = runner_.prefill(lead, prompt);
    stats_.prefill_tokens += prompt_tokens;
  }
  try {
    // The other samples hold the prompt's pages by reference (the partly filled last one is
    // copied on a sample's first write into it).
    for (std::size_t k = 1; k < seqs.size(); ++k) cache_.share_prefix(lead, seqs[k]->id, prompt_tokens);
    if (r.recompute) {
      // Each sample's generated tokens but the last are fed again by the next decode steps, one
      // row per step beside the running requests (decode()); the last is the input of the first
      // row that samples again.
      for (Sequence* q : seqs) {
        q->replay = q->tokens.size() - 1;
        stats_.recomputed_tokens += context(r, *q) - 1;
      }
      r.recompute = false;
      return;
    }
  } catch (...) {
    drop_prefix(r);
    release_sequences(r, false);
    throw;
  }
  const std::span<const float> last(logits.data() + logits.size() - c.vocab_size, static_cast<std::size_t>(c.vocab_size));
  for (Sequence* q : seqs) append_token(r, *q, next_token(r, *q, last, prompt_tokens - 1));
}

Scheduler::Queued Scheduler::take_front() {
  Queued r = std::move(waiting_.front());
  waiting_.pop_front();
  return r;
}

// Back in the queue a request holds no pages and pins nothing: what Running adds to Queued is
// made again at its next admission.
void Scheduler::requeue(Running&& r) {
  waiting_.push_front(std::move(static_cast<Queued&>(r)));
}

void Scheduler::admit() {
  const std::int64_t pool = cache_.pool_pages();
  const auto limit = static_cast<std::int64_t>(std::floor(config_.high_watermark * static_cast<double>(pool)));
  while (!waiting_.empty() && admit_front(pool, limit) != Admission::kWait) {
  }
}

Scheduler::Admission Scheduler::admit_front(std::int64_t pool, std::int64_t limit) {
  const Queued& w = waiting_.front();
  if (w.request.arrival_step > step_) return Admission::kWait;
  // max_batch bounds the sequences decoding; a request's samples join together (one alone
  // when nothing runs, whatever its n).
  if (!running_.empty() && running_sequences() + live(w) > config_.max_batch) return Admission::kWait;
  // max_new_tokens 0, or a prompt filling the context: done before any forward, and before
  // any page is asked for.
  if (const std::optional<StopReason> reason =
          w.seqs.front().tokens.empty() ? stop_reason(w, w.seqs.front()) : std::nullopt) {
    Queued nothing = take_front();
    finish(nothing, reason);
    return Admission::kEnded;
  }
  std::int64_t reserved = 0;
  if (config_.reserve_tokens > 0) {
    // Contiguous allocation: the whole reservation is taken at admission, growth never asks.
    reserved = cache_.request_pages(reservation_tokens(w.request)) * live(w);
    if (reserved_pages() + reserved > pool) {
      log(fmt::format("request {} waits: its reservation of {} pages does not fit beside {} reserved of {}",
                      w.request.id, reserved, reserved_pages(), pool));
      return Admission::kWait;
    }
  }
  // The pages of its context plus the next token must fit under the watermark beside the
  // running requests. With nothing running it is let in whatever it needs (waiting for room
  // would be forever): start() fails it if its context cannot be placed even alone, and decode
  // if it cannot grow even alone.
  std::int64_t need = pages_needed(w);
  // A prefix hit's pages stay pinned while room is made, so that the eviction below does not
  // take them, and start() prefills after them.
  const PrefixPageCache::Hit hit = pin_prefix_hit(w, need);
  const auto unpin_hit = [&] {
    if (prefix_) prefix_->unpin(hit.chain);
  };
  // Idle cached pages count as used until they are evicted, oldest first, to make room.
  while (config_.reserve_tokens == 0 && pool - cache_.free_pages() + need > limit && !running_.empty() &&
         evict_cached()) {
  }
  const std::int64_t used = pool - cache_.free_pages();
  if (config_.reserve_tokens == 0 && used + need > limit && !running_.empty()) {
    unpin_hit();
    log(fmt::format("request {} waits: needs {} pages, {} used of {} (watermark {} pages)", w.request.id, need,
                    used, pool, limit));
    return Admission::kWait;
  }
  Running r{take_front()};
  r.reserved_pages = reserved;
  StartResult started;
  try {
    started = start_with_room(r, hit);
  } catch (...) {
    unpin_hit();
    requeue(std::move(r));
    throw;
  }
  unpin_hit();
  switch (started.outcome) {
    case StartResult::Outcome::kStarted:
      return enter_batch(std::move(r));
    case StartResult::Outcome::kNoRoom:
      if (running_.empty()) {
        fail_running(r, fmt::format("cannot run even alone: {}", started.message));
        return Admission::kEnded;
      }
      log(fmt::format("request {} waits: {}", r.request.id, started.message));
      requeue(std::move(r));
      return Admission::kWait;
    case StartResult::Outcome::kInvalid:
      fail_running(r, started.message);
      return Admission::kEnded;
  }
  return Admission::kWait;
}

PrefixPageCache::Hit Scheduler::pin_prefix_hit(const Queued& r, std::int64_t& need) {
  PrefixPageCache::Hit hit;
  if (prefix_ && !r.swapped) {
    ++stats_.prefix_lookups;
    hit = prefix_->lookup(r.request.prompt, static_cast<std::int64_t>(r.request.prompt.size()) - 1);
    prefix_->pin(hit.chain);
    need -= static_cast<std::int64_t>(hit.chain.size()) * cache_.manager().heads_per_request();
  }
  return hit;
}

Scheduler::StartResult Scheduler::start_with_room(Running& r, const PrefixPageCache::Hit& hit) {
  for (;;) {
    try {
      start(r, hit);
      return {};
    } catch (const PoolExhausted& e) {
      if (evict_cached()) continue;  // start changed nothing: try again with the room made
      return {StartResult::Outcome::kNoRoom, e.what()};
    } catch (const InputError& e) {
      return {StartResult::Outcome::kInvalid, e.what()};
    }
  }
}

Scheduler::Admission Scheduler::enter_batch(Running&& r) {
  if (r.result.admitted_step < 0) r.result.admitted_step = step_;
  r.admit_order = admit_counter_++;
  for (Sequence& q : r.seqs) {
    if (q.done) continue;
    if (const std::optional<StopReason> reason = stop_reason(r, q)) {
      q.done = reason;
      cache_.release(q.id);
    }
  }
  if (live(r) == 0) {
    finish_running(r, std::nullopt);
    return Admission::kEnded;
  }
  running_.push_back(std::move(r));
  return Admission::kAdmitted;
}

void Scheduler::preempt(Running& r) {
  if (r.seqs.size() > 1) {
    // A group recomputes: its prompt is prefilled once and shared again, where a swap would
    // restore it once per sample.
    log(fmt::format("preempt request {} by recompute: {} samples of {} live, {} of {} pages free", r.request.id,
                    live(r), r.seqs.size(), cache_.free_pages(), cache_.pool_pages()));
    preempt_to_recompute(r);
    return;
  }
  const std::int64_t id = r.seqs.front().id;
  const std::int64_t ctx = context(r, r.seqs.front());
  const std::int64_t held = cache_.bytes_held(id);
  PreemptionMode mode = config_.preemption;
  const bool evicts = !cache_.policy().swappable();
  // What each would cost: the forward over the context but its last token (the next step's
  // input either way), against the bytes held copied out and back.
  const double recompute_flops = flops_per_context_token_ * static_cast<double>(ctx - 1);
  const double swap_bytes = 2.0 * static_cast<double>(held);
  if (mode == PreemptionMode::kAuto) {
    // Swap restores packed heads only; an evicting policy's heads are replayed instead.
    mode = evicts || recompute_flops <= config_.recompute_flops_per_swap_byte * swap_bytes ? PreemptionMode::kRecompute
                                                                                           : PreemptionMode::kSwap;
  }
  if (mode == PreemptionMode::kSwap && config_.max_swap_bytes > 0 && swap_held_bytes_ + held > config_.max_swap_bytes) {
    log(fmt::format("request {}: swapping {} bytes would hold {} of the {} host bytes allowed (max_swap_bytes): "
                    "recompute instead", r.request.id, held, swap_held_bytes_ + held, config_.max_swap_bytes));
    mode = PreemptionMode::kRecompute;
    ++stats_.swap_budget_recomputes;
  }
  log(fmt::format("preempt request {} by {}: context {} tokens, {} bytes held, {} of {} pages free, rule {} "
                  "(recompute {:.6g} FLOPs against swap {:.6g} bytes at {} FLOPs per byte{})",
                  r.request.id, preemption_mode_name(mode), ctx, held, cache_.free_pages(), cache_.pool_pages(),
                  preemption_mode_name(config_.preemption), recompute_flops, swap_bytes,
                  config_.recompute_flops_per_swap_byte,
                  evicts ? "; always recompute for a policy that evicts or splits tiers" : ""));
  if (mode == PreemptionMode::kSwap) {
    drop_prefix(r);
    const NvtxRange range("swap");
    r.swapped = cache_.swap_out(id);
    stats_.swapped_bytes += r.swapped->bytes();
    swap_held_bytes_ += r.swapped->bytes();
    ++stats_.preemptions_swap;
    ++r.result.preemptions;
  } else {
    preempt_to_recompute(r);
  }
}

void Scheduler::preempt_to_recompute(Running& r) {
  drop_prefix(r);
  release_sequences(r, true);
  r.recompute = true;
  ++stats_.preemptions_recompute;
  ++r.result.preemptions;
}

void Scheduler::decode() {
  for (;;) {
    if (running_.empty()) return;
    const DecodeBatch batch = decode_batch();
    try {
      runner_.decode_into(batch.ids, batch.tokens, batch.positions, &batch.sampling, logits_);
    } catch (const PoolExhausted& e) {
      if (make_room_for_decode(e)) continue;
      return;
    } catch (const RequestInputError& e) {
      fail_faulty_request(e);
      return;
    } catch (const InputError& e) {
      // Any other bad input of the step (none is known to reach here) fails its requests: each
      // ends with this error as its result, none is dropped.
      log(fmt::format("decode step failed ({}); failing its requests", e.what()));
      for (Running& r : running_) fail_running(r, e.what());
      running_.clear();
      return;
    }
    take_samples(batch);
    return;
  }
}

// One row per live sequence, request by request. A sequence replaying after a preemption by
// recompute feeds a generated token again and samples nothing: only the other rows ask for
// logits.
Scheduler::DecodeBatch Scheduler::decode_batch() const {
  DecodeBatch b;
  for (const Running& r : running_) {
    for (const Sequence& q : r.seqs) {
      if (q.done) continue;
      const std::size_t k = q.tokens.size() - 1 - q.replay;
      if (q.replay == 0) b.sampling.push_back(b.ids.size());
      b.ids.push_back(q.id);
      b.tokens.push_back(q.tokens[k]);
      b.positions.push_back(static_cast<std::int32_t>(r.request.prompt.size() + k));
    }
  }
  return b;
}

bool Scheduler::make_room_for_decode(const PoolExhausted& e) {
  // Evict an idle cached prefix page first; then preempt the most recently admitted request
  // and retry; alone and still too big: fail it.
  if (evict_cached()) return true;
  auto victim = std::max_element(running_.begin(), running_.end(), [](const Running& a, const Running& b) {
    return a.admit_order < b.admit_order;
  });
  if (running_.size() == 1) {
    Running failed = std::move(*victim);
    running_.clear();
    fail_running(failed, fmt::format("cannot grow even alone: {}", e.what()));
    return false;
  }
  Running preempted = std::move(*victim);
  running_.erase(victim);
  preempt(preempted);
  requeue(std::move(preempted));
  return true;
}

void Scheduler::fail_faulty_request(const RequestInputError& e) {
  // The step was cut short part-way through the layers, so the others' caches may hold part of
  // it: they are preempted by recompute, which replays them exactly, and rejoin at the front in
  // the order they were admitted.
  log(fmt::format("decode step failed for request {} ({}); the other {} requests of the step replay it",
                  e.request(), e.what(), running_.size() - 1));
  std::vector<Running> others;
  for (Running& r : running_) {
    if (std::any_of(r.seqs.begin(), r.seqs.end(), [&](const Sequence& q) { return q.id == e.request(); })) {
      fail_running(r, e.what());
      ++stats_.request_faults;
    } else {
      others.push_back(std::move(r));
    }
  }
  running_.clear();
  std::sort(others.begin(), others.end(),
            [](const Running& a, const Running& b) { return a.admit_order > b.admit_order; });
  for (Running& r : others) {
    preempt_to_recompute(r);
    requeue(std::move(r));
  }
}

void Scheduler::take_samples(const DecodeBatch& batch) {
  const ModelConfig& c = runner_.weights().config;
  const auto sampled = static_cast<std::int64_t>(batch.sampling.size());
  stats_.decode_tokens += sampled;
  stats_.replayed_rows += static_cast<std::int64_t>(batch.ids.size()) - sampled;
  if (sampled > 0) ++stats_.decode_steps;
  stats_.max_batch_seen = std::max(stats_.max_batch_seen, sampled);
  std::vector<Running> still;
  std::size_t row = 0, sample_row = 0;
  for (Running& r : running_) {
    bool failed = false;
    for (Sequence& q : r.seqs) {
      if (q.done) continue;
      const std::size_t i = row++;
      if (q.replay > 0) {
        --q.replay;
        continue;
      }
      const std::size_t s = sample_row++;
      if (failed) continue;
      try {
        append_token(r, q,
                     next_token(r, q, {logits_.data() + s * static_cast<std::size_t>(c.vocab_size),
                                       static_cast<std::size_t>(c.vocab_size)},
                                batch.positions[i]));
      } catch (const InputError& e) {
        fail_running(r, e.what());
        failed = true;
        continue;
      }
      if (const std::optional<StopReason> reason = stop_reason(r, q)) finish_sequence(r, q, *reason);
    }
    if (!failed && live(r) > 0) still.push_back(std::move(r));
  }
  running_ = std::move(still);
}

bool Scheduler::cancel(std::int64_t id) {
  // Its swapped bytes go and it is counted and logged; finish() then releases its pages (none
  // when queued).
  const auto cancelled = [&](Queued& r) {
    if (r.swapped) {
      swap_held_bytes_ -= r.swapped->bytes();
      r.swapped.reset();
    }
    ++stats_.cancelled;
    log(fmt::format("request {} cancelled after {} tokens", id, r.seqs.empty() ? 0 : r.seqs.front().tokens.size()));
  };
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if (it->request.id != id) continue;
    Queued r = std::move(*it);
    waiting_.erase(it);
    cancelled(r);
    finish(r, StopReason::kCancelled);
    return true;
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if (it->request.id != id) continue;
    Running r = std::move(*it);
    running_.erase(it);
    cancelled(r);
    finish_running(r, StopReason::kCancelled);
    return true;
  }
  return false;
}

bool Scheduler::step() {
  if (waiting_.empty() && running_.empty()) return false;
  const NvtxRange range("step");
  const StepTimer timer(StepPart::kStep);
  admit();
  decode();
  if (prefix_) {
    stats_.peak_shared_pages = std::max(stats_.peak_shared_pages, prefix_->shared_pages());
    stats_.prefix_cached_entries = prefix_->entries();
  }
  stats_.cow_copies = cache_.manager().cow_copies();
  ++step_;
  ++stats_.steps;
  return !(waiting_.empty() && running_.empty());
}

std::vector<GenerationResult> Scheduler::run() {
  while (step()) {
  }
  std::vector<GenerationResult> out;
  for (std::int64_t id : order_) out.push_back(results_.at(id));
  return out;
}

}  // namespace kvcheck
