// The engine's scheduler (docs/design.md §10): continuous batching over the model runner.
//
// Each step:
//   1. admission   waiting requests (in arrival order, once their arrival step has come) join the
//                  running batch while the batch has room and the pool, after giving the request
//                  the pages of its context plus one token, stays at or under the high
//                  watermark (a share of the pool kept for the running requests' growth);
//                  a preempted request resumes first, by swap-in or by recompute;
//   2. decode      one token for every running request, as one batch; when the pool cannot hold
//                  the step, the most recently admitted request is preempted (its pages freed)
//                  and the step retried;
//   3. retirement  requests that reached max_new_tokens, EOS or max_position_embeddings leave
//                  and free their pages.
//
// Preemption by recompute drops the pages and later replays the request exactly as it first ran:
// prefill of the prompt, then its generated tokens fed again one per decode step, each a row of
// the running batch (no logits: the token is known), so its tokens and logits are bit-identical
// to an uninterrupted run (decode rows are batch-invariant) and a replayed token costs a row of a
// step that reads the weights anyway, not a step of its own. Preemption by swap copies the
// request's slot codes to host memory and back into fresh pages in the same walk order:
// bit-identical as well.
// The rule (PreemptionMode::kAuto) weighs what each costs: recompute re-runs context tokens
// through the model, swap moves the bytes held twice; every decision and its inputs are logged.
// Swap restores packed heads, so an evicting policy (kv_policy.h) always recomputes: kAuto picks
// recompute for it, and kSwap with it is refused when the scheduler is built.
//
// A request whose prompt alone cannot fit the pool is rejected at submission time, and a
// request that cannot make progress even when it runs alone fails with a message naming it:
// nothing is lost silently, every submitted request ends in exactly one result.
//
// Faults stay with the request that caused them: a NaN or out-of-range key or value of one
// request (RequestInputError) fails that request, and the others of its decode step, whose step
// was cut short, are preempted by recompute and replay it exactly. cancel() ends a queued or
// running request at once and returns its pages. Swapped-out bytes held on the host are bounded
// by max_swap_bytes: a swap that would exceed it becomes a recompute, logged.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optimized/greedy_decoding.h"
#include "optimized/model_runner.h"
#include "optimized/paged_kv_cache.h"
#include "optimized/prefix_page_cache.h"

namespace kvcheck {

class PoolExhausted;
class RequestInputError;

enum class PreemptionMode { kRecompute, kSwap, kAuto };
// "recompute", "swap", "auto"; InputError for anything else.
PreemptionMode parse_preemption_mode(const std::string& name);
std::string preemption_mode_name(PreemptionMode mode);

struct SchedulerConfig {
  std::int64_t max_batch = 32;
  double high_watermark = 0.95;  // admission keeps used pages at or under this share of the pool
  PreemptionMode preemption = PreemptionMode::kAuto;
  // kAuto: recompute when the forward over the context costs less than copying the bytes held
  // out and back, at this many FLOPs per byte copied: recompute when 2 x (the layers' weights) x
  // (context - 1) <= recompute_flops_per_swap_byte x 2 x (bytes held), else swap. The default is
  // the CPU's: a float GEMM's rate over a memcpy's, about 250 GFLOP/s over 36 GB/s on the two
  // cores the benchmarks run on (bench/bench_baselines.h measures both). A KV token holds a few
  // KB against millions of FLOPs of weights, so on the CPU a swappable policy swaps; a machine
  // whose swap crosses a slow link (a GPU over PCIe: tens of thousands) recomputes short contexts.
  double recompute_flops_per_swap_byte = 8.0;
  // Receives one line per scheduling decision (admission refused, preemption and its inputs).
  std::function<void(const std::string&)> log;
  // 0: pages are taken as a request grows (paging). > 0: contiguous allocation, as a cache that
  // gives each request its maximum length up front: a request reserves, when it is admitted, the
  // pages of its prompt plus its output cap (max_new_tokens), at most this many tokens (the
  // cache's longest sequence, e.g. max_position_embeddings), and is admitted only while the
  // reservations fit the pool. A request whose reservation exceeds the whole pool is answered at
  // submission with that reason. Growth never exceeds a reservation that covers its output cap,
  // so nothing is preempted.
  std::int64_t reserve_tokens = 0;
  // Called after a token is appended to a request's output: (request id, tokens generated so far).
  // Replays after a preemption by recompute append nothing and call nothing.
  std::function<void(std::int64_t, std::size_t)> on_token;
  // Host memory for swapped-out requests, bytes (0: unbounded). A swap preemption that would hold
  // more falls back to recompute.
  std::int64_t max_swap_bytes = 0;
  // Prefix caching (optimized/prefix_page_cache.h): a prompt starting with the whole pages of an
  // earlier prompt takes references to them instead of computing them (at least its last token is
  // computed: its logits give the first output token), and its own whole prompt pages are cached
  // for later prompts; idle cached pages are evicted, least recently used first, when admission
  // or a decode step needs pages. Needs paging (reserve_tokens 0) and a prefix-closed policy, and
  // turns on the runner's reusable prefill (ModelRunner::set_reusable_prefill), so every
  // request's tokens and logits are those of its run without the cache in that mode.
  bool prefix_cache = false;
  int prefix_cache_hash_bits = 64;  // tests: a few bits make hash collisions common
};

struct GenerationRequest {
  std::int64_t id = 0;
  std::vector<std::int32_t> prompt;
  std::int64_t max_new_tokens = 16;
  bool stop_at_eos = true;
  std::int64_t arrival_step = 0;  // the request may join from this scheduler step on
  // Sampling (optimized/sampling.h): temperature 0 (the default) is greedy; otherwise tokens are
  // drawn from softmax(logits / temperature) cut to the top_p nucleus, each draw keyed by
  // (seed, sample, position), so a replay draws the same tokens.
  double temperature = 0.0;
  double top_p = 1.0;
  std::uint64_t seed = 0;
  // Parallel sampling (vLLM's fork): n continuations, samples first_sample .. first_sample+n-1,
  // share the prompt's pages and diverge by copy-on-write; the group is admitted, preempted (by
  // recompute: a swap would restore the prompt n times) and resumed as a unit. Sample k's tokens
  // are those of a one-sample request with first_sample k. n > 1 needs a prefix-closed policy.
  std::int64_t n = 1;
  std::int64_t first_sample = 0;
};

struct GenerationResult {
  std::int64_t id = 0;
  std::vector<std::int32_t> tokens;  // generated tokens, in order
  // Why it ended (optimized/greedy_decoding.h; stop_reason_name gives the name the CLI and JSON
  // print). A result is recorded when its request ends, so kError is only the unset value.
  StopReason stop_reason = StopReason::kError;
  std::string error;                 // why a request failed or was rejected
  std::int64_t preemptions = 0;
  std::int64_t admitted_step = -1;
  std::int64_t finished_step = -1;
  // n > 1: every sample's tokens and stop reason, samples[0] being `tokens` (stop_reason is the
  // request's: sample 0's, or kCancelled / kError for all of them).
  std::vector<std::vector<std::int32_t>> samples;
  std::vector<StopReason> sample_stop_reasons;
};

struct SchedulerStats {
  std::int64_t steps = 0;
  std::int64_t decode_steps = 0;  // steps that decoded at least one request
  std::int64_t decode_tokens = 0;
  std::int64_t prefill_tokens = 0;
  std::int64_t max_batch_seen = 0;
  std::int64_t preemptions_recompute = 0;
  std::int64_t preemptions_swap = 0;
  std::int64_t recomputed_tokens = 0;  // prompt tokens prefilled again + generated tokens fed again
  std::int64_t replayed_rows = 0;      // decode rows that fed a generated token again (no logits)
  std::int64_t swapped_bytes = 0;  // out and in
  std::int64_t swap_budget_recomputes = 0;  // swap preemptions turned into recompute by max_swap_bytes
  std::int64_t cancelled = 0;
  std::int64_t request_faults = 0;  // requests failed alone by their own NaN / out-of-range activations
  // Prefix caching (zero without it).
  std::int64_t prefix_lookups = 0;
  std::int64_t prefix_hit_tokens = 0;       // prompt tokens taken from the cache: prefill tokens saved
  std::int64_t prefix_evictions = 0;        // cached pages (whole pages of every head) evicted
  std::int64_t prefix_cached_entries = 0;   // cached whole pages at the end
  std::int64_t peak_shared_pages = 0;       // pages two or more running requests listed at once, peak over steps
  std::int64_t cow_copies = 0;              // copy-on-write page copies (the page manager's)
};

class Scheduler {
 public:
  Scheduler(ModelRunner& runner, SchedulerConfig config);

  // Queues a request. Its id must be unique among the scheduler's requests (InputError).
  void submit(GenerationRequest request);
  // One scheduling step; false when nothing is waiting or running.
  bool step();
  // Ends request `id` now if it is queued (waiting, or preempted) or running: its pages and any
  // swapped bytes are returned, its result has the tokens generated so far and stop reason
  // "cancelled". False (and nothing changes) for an id never submitted or already finished.
  bool cancel(std::int64_t id);
  // Bytes of swapped-out requests held on the host now.
  std::int64_t swap_held_bytes() const { return swap_held_bytes_; }
  // Steps until every request has a result; results in submission order.
  std::vector<GenerationResult> run();
  const SchedulerStats& stats() const { return stats_; }
  std::int64_t current_step() const { return step_; }
  std::int64_t running() const { return static_cast<std::int64_t>(running_.size()); }
  // Sequences decoding: a request's samples still generating, summed over the running requests
  // (what max_batch bounds).
  std::int64_t running_sequences() const;
  std::int64_t waiting() const { return static_cast<std::int64_t>(waiting_.size()); }
  // Pages reserved by running requests under SchedulerConfig::reserve_tokens (0 when paging).
  std::int64_t reserved_pages() const;

 private:
  // One continuation of a request: its page-manager id (the request's own for the first, one of
  // the scheduler's below -2^62 for the others), sample index and tokens.
  struct Sequence {
    std::int64_t id = 0;
    std::int64_t sample = 0;
    std::vector<std::int32_t> tokens;
    std::optional<StopReason> done;  // its stop reason once it stopped (its pages then released)
    // Generated tokens still to be fed again after a preemption by recompute: the sequence's next
    // decode row inputs tokens[size - 1 - replay] at its position and samples nothing; at 0 the
    // row inputs the last token and samples the next.
    std::size_t replay = 0;
  };
  // What a queued request carries, before its admission or after a preemption: it holds no pages
  // and pins no prefix-cache entries.
  struct Queued {
    GenerationRequest request;
    GenerationResult result;
    std::vector<Sequence> seqs;                    // n of them
    std::optional<PagedKvCache::Swapped> swapped;  // set while preempted by swap (n = 1 only)
    bool recompute = false;                        // set while preempted by recompute
  };
  // An admitted request: made from its Queued at admission, and back to one when preempted.
  struct Running : Queued {
    explicit Running(Queued queued) : Queued(std::move(queued)) {}
    std::int64_t admit_order = 0;
    std::int64_t reserved_pages = 0;               // its contiguous reservation (reserve_tokens > 0)
    std::vector<BlockId> prefix_chain;             // prefix-cache entries it pins (its prompt's whole pages)
  };
  // What admitting the front of the queue came to.
  enum class Admission {
    kAdmitted,  // it runs
    kEnded,     // it finished or failed without running: the next may be tried
    kWait,      // it stays at the front (not arrived, no room): admission stops for this step
  };
  // What start() came to: kNoRoom (the pool cannot hold it, even after evicting idle cached
  // prefix pages) and kInvalid (an InputError: it fails) carry the message.
  struct StartResult {
    enum class Outcome { kStarted, kNoRoom, kInvalid } outcome = Outcome::kStarted;
    std::string message;
  };
  // One decode step's rows, one per live sequence of the running requests in order.
  struct DecodeBatch {
    std::vector<std::int64_t> ids;
    std::vector<std::int32_t> tokens, positions;
    std::vector<std::size_t> sampling;  // the rows that sample (a replayed row does not)
  };

  void log(const std::string& line) const;
  // Tokens a contiguous reservation holds for this request: prompt + output cap, at most
  // reserve_tokens.
  std::int64_t reservation_tokens(const GenerationRequest& request) const;
  void append_token(Queued& r, Sequence& q, std::int32_t token);
  // The sampled token of sequence q after `position` from its logits row.
  std::int32_t next_token(const Queued& r, const Sequence& q, std::span<const float> logits, std::int64_t position) const;
  // Sequences of r still generating.
  static std::int64_t live(const Queued& r);

  // Admission (step 1): admit_front until it returns kWait or the queue is empty.
  void admit();
  Admission admit_front(std::int64_t pool, std::int64_t limit);
  // Takes the front of the queue; requeue puts a preempted or refused request back in front.
  Queued take_front();
  void requeue(Running&& r);
  // A prefix hit for r (the cached whole pages of its prompt but its last token), pinned; `need`
  // loses the pages it brings. Empty without the cache or for a swapped-out request.
  PrefixPageCache::Hit pin_prefix_hit(const Queued& r, std::int64_t& need);
  // start(), retried while evicting an idle cached prefix page makes room.
  StartResult start_with_room(Running& r, const PrefixPageCache::Hit& hit);
  // Resumes or starts a request: prefill (after `hit`, the prefix cache's pages of its prompt,
  // empty without the cache) and replay, or swap-in. PoolExhausted propagates.
  void start(Running& r, const PrefixPageCache::Hit& hit);
  // A started request joins the batch, unless every sequence already stopped.
  Admission enter_batch(Running&& r);

  // Decode (step 2) and retirement (step 3).
  void decode();
  DecodeBatch decode_batch() const;
  // After PoolExhausted: evicts an idle cached prefix page, or preempts the most recently
  // admitted request; true to retry the step. Alone and still too big, the request fails: false.
  bool make_room_for_decode(const PoolExhausted& e);
  // One request's own bad key or value (RequestInputError): it fails, the others replay the step.
  void fail_faulty_request(const RequestInputError& e);
  // Appends each sampling row's token, retires the sequences that stop.
  void take_samples(const DecodeBatch& batch);

  void preempt(Running& r);
  // Frees r's pages and marks it to be prefilled again and its generated tokens replayed.
  void preempt_to_recompute(Running& r);
  // Releases every live sequence's pages (finish, failure, preemption by recompute).
  void release_sequences(Queued& r, bool preempted);
  // r's result from its sequences: a sequence that stopped keeps its reason, the live ones (none
  // unless cancelled, or finished before any forward) take `live_reason`.
  void finish(Queued& r, std::optional<StopReason> live_reason);
  void fail(Queued& r, const std::string& error);
  // finish and fail for an admitted request: its prefix-cache entries are unpinned first.
  void finish_running(Running& r, std::optional<StopReason> live_reason);
  void fail_running(Running& r, const std::string& error);
  // Writes r's result from its sequences: the request's stop reason and each sample's.
  void record(Queued& r, StopReason stop, const std::vector<StopReason>& sample_reasons);
  // Sequence q stopped: its pages go; the request finishes with its last sequence.
  void finish_sequence(Running& r, Sequence& q, StopReason reason);
  // Unpins r's prefix-cache entries (when its pages go: finish, failure, preemption).
  void drop_prefix(Running& r);
  // Evicts the least recently used idle cached prefix page; false when none.
  bool evict_cached();
  // Why a sequence stops now (optimized/greedy_decoding.h), or nullopt.
  std::optional<StopReason> stop_reason(const Queued& r, const Sequence& q) const;
  static std::int64_t context(const Queued& r, const Sequence& q) {
    return static_cast<std::int64_t>(r.request.prompt.size() + q.tokens.size());
  }
  // Pages a request's live sequences need for their contexts plus one token each, the prompt's
  // whole pages counted once when they share them.
  std::int64_t pages_needed(const Queued& r) const;

  ModelRunner& runner_;
  PagedKvCache& cache_;
  SchedulerConfig config_;
  std::int64_t step_ = 0;
  std::int64_t admit_counter_ = 0;
  double flops_per_context_token_ = 0.0;  // 2 x the layers' projection weights: a recomputed token's FLOPs
  std::int64_t swap_held_bytes_ = 0;
  std::optional<PrefixPageCache> prefix_;
  std::int64_t next_fork_id_ = PrefixPageCache::kHolderIds / 2 - 1;  // sequences 1.. of a request, downwards
  std::vector<float> logits_;          // a decode step's sampling rows, kept from step to step
  std::deque<Queued> waiting_;         // arrival order; preempted requests go back to the front
  std::vector<Running> running_;
  std::map<std::int64_t, GenerationResult> results_;
  std::vector<std::int64_t> order_;    // submission order
  SchedulerStats stats_;
};

}  // namespace kvcheck
