// The scheduler driven by a command stream from the fuzzer's bytes (see fuzz_targets.h): on a
// one-layer dummy model with a 48-token context, the first bytes pick a policy, a preemption
// mode, a batch limit, a watermark, a host-swap budget, paging (with the prefix cache, for a
// prefix-closed policy, when the reservation byte is 1) or contiguous reservation, and a
// pool of 6 to 63 pages of 512 to 2048 bytes; then submissions (empty, too long, unknown token
// ids and duplicate ids among them; 1 to 4 samples each, greedy or sampled), steps and
// cancellations. The seed corpus is written by
// make_scheduler_seeds.py, which spells the encoding out.
// After every command: every page is free or held (a shared page counted once), the batch within
// its limit, swapped bytes within their budget. At the end run() finishes everything, and
//   - every accepted id has exactly one result, in submission order, and a duplicate was refused;
//   - a finished request's tokens equal its solo run, a cancelled one's are a prefix of it, and
//     max_new_tokens means exactly that many;
//   - errors are named, every page is back in the pool but the prefix cache's (one page per
//     head of each cached entry) and no swapped byte is left.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "optimized/engine.h"
#include "optimized/scheduler.h"
#include "properties/fuzz/fuzz_bytes.h"
#include "properties/fuzz/fuzz_targets.h"
#include "reference/dummy_model.h"
#include "reference/errors.h"

namespace kvcheck::fuzz {
namespace {

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "scheduler invariant broken: %s\n", what.c_str());
  std::abort();
}

constexpr std::int64_t kContext = 48;
constexpr std::int64_t kIds = 12;
// One of each kind: uniform fp16 and INT, two tiers (LeanKV), a residual flushed in groups (KIVI),
// evictions chosen by score, by position and by prompt statistics, SpvLLM's page strategies.
const char* const kPolicies[] = {"full-fp16",
                                 "int8",
                                 "leankv:window=8",
                                 "kivi2:group=16,residual=16",
                                 "h2o:budget=12",
                                 "streaming:sinks=4,window=8",
                                 "snapkv:budget=12,window=4",
                                 "spvllm:budget=12,strategy=no-op",
                                 "spvllm:budget=12,strategy=sparse-copy"};

const ReferenceModel& model() {
  static const ReferenceModel m = [] {
    ModelConfig c = dummy_shape_config("kvcheck-tiny", 1);
    c.max_position_embeddings = kContext;
    return make_dummy_model(c, "kvcheck-tiny", 11);
  }();
  return m;
}

std::unique_ptr<Engine> engine(const std::string& policy, std::int64_t pages, std::int64_t page_bytes) {
  EngineOptions o;
  o.policy = policy;
  o.page_bytes = page_bytes;
  o.pages = pages;
  o.threads = 1;
  o.poison = true;
  return make_engine(model(), o);
}

// Sample k's tokens when it runs alone (one sample, first_sample k), on an engine with room for
// everything (with the prefix cache's reusable prefill when the run had the cache).
std::vector<std::int32_t> solo(std::size_t policy, bool reusable, const GenerationRequest& r, std::int64_t k) {
  static std::map<std::pair<std::size_t, bool>, std::unique_ptr<Engine>> engines;
  std::unique_ptr<Engine>& e = engines[{policy, reusable}];
  if (!e) {
    e = engine(kPolicies[policy], 0, 2048);
    e->runner->set_reusable_prefill(reusable);
  }
  Scheduler s(*e->runner, SchedulerConfig{});
  GenerationRequest one = r;
  one.n = 1;
  one.first_sample = r.first_sample + k;
  one.arrival_step = 0;
  s.submit(one);
  return s.run().front().tokens;
}

void check_pages(const PagedKvCache& cache) {
  const PageManagerStats s = cache.manager().stats();
  const std::int64_t held = s.tiers[0].pages + s.tiers[1].pages - s.shared_references;
  if (s.free_pages + held != s.pool_pages) {
    broken("pages neither free nor held by a request: " + std::to_string(s.pool_pages - s.free_pages - held));
  }
}

}  // namespace

int scheduler(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  const auto policy = static_cast<std::size_t>(in.below(std::size(kPolicies)));
  SchedulerConfig config;
  config.preemption = static_cast<PreemptionMode>(in.below(3));
  config.max_batch = 1 + in.below(6);
  config.high_watermark = 0.5 + 0.1 * static_cast<double>(in.below(6));
  config.recompute_flops_per_swap_byte = std::ldexp(1.0, static_cast<int>(in.below(kContext) % 24));
  config.max_swap_bytes = in.below(4) * 2048;
  const std::uint64_t reservation = in.below(4);
  config.reserve_tokens = reservation == 0 ? kContext : 0;
  config.prefix_cache = reservation == 1 && make_policy(kPolicies[policy])->prefix_closed();
  // KVCHECK_FUZZ_LOG=1: the scheduler's decisions on stderr, to read a reproduced failure.
  if (std::getenv("KVCHECK_FUZZ_LOG") != nullptr) {
    config.log = [](const std::string& line) { std::fprintf(stderr, "scheduler: %s\n", line.c_str()); };
  }
  const std::int64_t pages = 6 + in.below(58);
  // 512 bytes: 3 fp16 tokens of a 32-wide head, so pages fill and run out quickly.
  const std::int64_t page_bytes = std::int64_t{512} << in.below(3);
  std::unique_ptr<Engine> e;
  std::unique_ptr<Scheduler> s;
  try {
    e = engine(kPolicies[policy], pages, page_bytes);
    s = std::make_unique<Scheduler>(*e->runner, config);
  } catch (const InputError&) {
    return 0;  // refused with its reason: a page too small for a policy's groups, swap with eviction
  }
  const std::int64_t vocab = model().config().vocab_size;
  std::map<std::int64_t, GenerationRequest> accepted;
  std::vector<std::int64_t> order;
  std::set<std::int64_t> cancelled;
  for (int command = 0; command < 48 && !in.empty(); ++command) {
    switch (in.below(4)) {
      case 0: {
        GenerationRequest r;
        r.id = in.below(kIds);
        r.prompt.resize(static_cast<std::size_t>(in.below(kContext + 8)));  // empty and too long included
        const bool unknown_ids = in.below(8) == 0;
        for (std::int32_t& t : r.prompt) t = static_cast<std::int32_t>(in.below_wide(unknown_ids ? vocab + 64 : vocab));
        r.max_new_tokens = in.below(24);
        r.stop_at_eos = in.below(2) == 0;
        r.arrival_step = in.below(4);
        // Parallel sampling: 1 to 4 samples (more than one only for a prefix-closed policy: the
        // others are answered with that reason), greedy or at a temperature, seeded by the id.
        r.n = 1 + in.below(4);
        r.temperature = std::array{0.0, 0.8, 1.5}[in.below(3)];
        r.top_p = r.temperature > 0.0 ? 0.9 : 1.0;
        r.seed = static_cast<std::uint64_t>(r.id);
        const bool duplicate = accepted.contains(r.id);
        try {
          s->submit(r);
          if (duplicate) broken("request " + std::to_string(r.id) + " accepted twice");
          order.push_back(r.id);
          accepted.emplace(r.id, std::move(r));
        } catch (const InputError&) {
          if (!duplicate) broken("request " + std::to_string(r.id) + " refused although its id is new");
        }
        break;
      }
      case 1: s->step(); break;
      case 2: {
        const std::int64_t id = in.below(kIds);
        if (s->cancel(id)) {
          if (!accepted.contains(id)) broken("cancel(" + std::to_string(id) + ") of an id never submitted");
          cancelled.insert(id);
        }
        break;
      }
      default:
        for (int k = 0; k < 4; ++k) s->step();
    }
    check_pages(*e->cache);
    if (s->running() > config.max_batch) broken("the batch exceeds max_batch");
    if (config.max_swap_bytes > 0 && s->swap_held_bytes() > config.max_swap_bytes) broken("swap beyond max_swap_bytes");
  }

  const std::vector<GenerationResult> results = s->run();
  if (results.size() != order.size()) broken("results for " + std::to_string(results.size()) + " of " +
                                             std::to_string(order.size()) + " requests");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const GenerationResult& res = results[i];
    const std::string name = "request " + std::to_string(res.id);
    if (res.id != order[i]) broken("results out of submission order at " + name);
    const GenerationRequest& req = accepted.at(res.id);
    if (cancelled.contains(res.id) != (res.stop_reason == StopReason::kCancelled)) broken(name + ": cancelled, or not, wrongly");
    if (res.stop_reason == StopReason::kError) {
      if (res.error.find(name) == std::string::npos) broken(name + ": an error that does not name it: " + res.error);
      continue;
    }
    if (static_cast<std::int64_t>(res.tokens.size()) > req.max_new_tokens) broken(name + ": more tokens than asked");
    if (res.stop_reason == StopReason::kMaxNewTokens && static_cast<std::int64_t>(res.tokens.size()) != req.max_new_tokens) {
      broken(name + ": stopped at max_new_tokens early");
    }
    if (req.n > 1 && static_cast<std::int64_t>(res.samples.size()) != req.n) broken(name + ": samples missing");
    for (std::int64_t k = 0; k < req.n; ++k) {
      const std::vector<std::int32_t>& got = req.n > 1 ? res.samples[static_cast<std::size_t>(k)] : res.tokens;
      const std::vector<std::int32_t> alone = solo(policy, config.prefix_cache, req, k);
      const bool prefix = got.size() <= alone.size() && std::equal(got.begin(), got.end(), alone.begin());
      if (!prefix || (res.stop_reason != StopReason::kCancelled && got.size() != alone.size())) {
        broken(name + " sample " + std::to_string(k) + ": tokens differ from its solo run (" + kPolicies[policy] +
               ", stop " + stop_reason_name(res.stop_reason) + ")");
      }
    }
  }
  const std::int64_t cached = s->stats().prefix_cached_entries * e->cache->manager().heads_per_request();
  if (e->cache->free_pages() + cached != e->cache->pool_pages()) broken("pages held after every request ended");
  if (s->swap_held_bytes() != 0 || s->running() != 0 || s->waiting() != 0) broken("state left after run()");
  return 0;
}

}  // namespace kvcheck::fuzz
