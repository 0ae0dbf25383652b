// The prefix cache end to end (optimized/prefix_page_cache.h through the scheduler): sharing is
// invisible. Under random workloads whose prompts share system prompts of random, page-unaligned
// lengths, with a pool small enough that requests are preempted (by swap and by recompute) and
// cached pages are evicted, every request's tokens, and every decode step's attention output of
// every layer and kv head, are bit for bit those of its run without any sharing (no prefix cache,
// the same reusable prefill, a pool that never preempts). Also: a hit's prefill gives the whole
// prompt's logits bit for bit; a hash cut to one bit (collisions everywhere) never hands out
// another prompt's pages; what cannot share is refused by name.
//   RC_PARAMS="seed=7" build/properties/kvcheck_property_tests --gtest_filter='PrefixCacheEngine*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "optimized/engine.h"
#include "optimized/scheduler.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/property_check.h"
#include "properties/support/test_support.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::expect_input_error;
using testing::test_tokens;
using testing::tiny_config;
using testing::tiny_model;

std::unique_ptr<Engine> engine_with(const ReferenceModel& model, const std::string& policy, std::int64_t pages,
                                    std::int64_t page_bytes = 512) {
  EngineOptions o;
  o.policy = policy;
  o.page_bytes = page_bytes;
  o.pages = pages;
  o.threads = 1;
  o.poison = true;
  return make_engine(model, o);
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every decode step's attention output, by (request, position, layer, kv head): a replay after a
// preemption by recompute writes the same key again.
using Outputs = std::map<std::tuple<std::int64_t, std::int32_t, std::int32_t, std::int32_t>, std::vector<float>>;

struct SchedulerRun {
  std::vector<GenerationResult> results;
  Outputs outputs;
  SchedulerStats stats;
};

SchedulerRun run_scheduler(const ReferenceModel& model, const std::string& policy, std::int64_t pages, SchedulerConfig config,
        const std::vector<GenerationRequest>& requests, bool reusable) {
  auto e = engine_with(model, policy, pages);
  if (reusable) e->runner->set_reusable_prefill(true);
  SchedulerRun out;
  RunnerTrace trace;
  trace.on_decode_head = [&](const DecodeHeadTrace& t) {
    out.outputs[{t.request, t.position, t.layer, t.kv_head}].assign(t.out.begin(), t.out.end());
  };
  e->runner->set_trace(&trace);
  Scheduler s(*e->runner, std::move(config));
  for (const GenerationRequest& r : requests) s.submit(r);
  out.results = s.run();
  out.stats = s.stats();
  return out;
}

struct Totals {
  std::int64_t runs = 0, hit_tokens = 0, evictions = 0, recompute = 0, swap = 0, peak_shared = 0;
};
Totals g_totals;

TEST(PrefixCacheEngineProps, SharingIsInvisible) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 17);
  check_property("prefix cache/sharing is invisible", 200, [&] {
    const std::string policy =
        *rc::gen::element<std::string>("full-fp32", "full-fp16", "int8", "int4", "kv-bits:k=4,v=2", "int4:rotate=hadamard",
                                       "quest:pages=2");
    // Two or three system prompts; each request one of them (or none) plus its own tail.
    const auto systems = *rc::gen::inRange(1, 4);
    std::vector<std::vector<std::int32_t>> prefixes;
    for (int i = 0; i < systems; ++i) {
      prefixes.push_back(test_tokens(*rc::gen::inRange<std::int64_t>(1, 40), c.vocab_size,
                                     *rc::gen::arbitrary<std::uint32_t>()));
    }
    std::vector<GenerationRequest> requests;
    const auto n = *rc::gen::inRange(2, 14);
    for (int i = 0; i < n; ++i) {
      GenerationRequest r;
      r.id = i;
      const auto which = *rc::gen::inRange(0, systems + 1);
      if (which < systems) r.prompt = prefixes[static_cast<std::size_t>(which)];
      const auto tail = test_tokens(*rc::gen::inRange<std::int64_t>(r.prompt.empty() ? 1 : 0, 16), c.vocab_size,
                                    *rc::gen::arbitrary<std::uint32_t>());
      r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
      r.max_new_tokens = *rc::gen::inRange<std::int64_t>(1, 20);
      r.stop_at_eos = false;
      r.arrival_step = *rc::gen::inRange<std::int64_t>(0, 6);
      requests.push_back(std::move(r));
    }
    SchedulerConfig sc;
    sc.max_batch = *rc::gen::inRange<std::int64_t>(1, 6);
    sc.preemption = *rc::gen::element(PreemptionMode::kRecompute, PreemptionMode::kSwap, PreemptionMode::kAuto);
    // kAuto's balance from 1 to 2^19 FLOPs per byte: both sides of the tiny models' cost ratio.
    sc.recompute_flops_per_swap_byte = std::ldexp(1.0, *rc::gen::inRange(0, 20));
    sc.prefix_cache = true;
    sc.prefix_cache_hash_bits = *rc::gen::element(64, 3);
    // From a pool that holds a little more than the longest request alone to one that never fills.
    std::int64_t longest = 0;
    const auto probe = engine_with(model, policy, 1);
    for (const GenerationRequest& r : requests) {
      longest = std::max(longest, probe->cache->request_pages(static_cast<std::int64_t>(r.prompt.size()) + r.max_new_tokens));
    }
    const std::int64_t pages = longest * *rc::gen::element<std::int64_t>(5, 6, 8, 12, 100) / 4;
    const SchedulerRun shared = run_scheduler(model, policy, pages, sc, requests, true);
    SchedulerConfig plain;
    plain.max_batch = 64;
    const SchedulerRun alone = run_scheduler(model, policy, 4000, plain, requests, true);
    RC_ASSERT(shared.results.size() == alone.results.size());
    for (std::size_t i = 0; i < shared.results.size(); ++i) {
      const GenerationResult& a = shared.results[i];
      const GenerationResult& b = alone.results[i];
      if (!(a.stop_reason == b.stop_reason)) RC_FAIL(fmt::format("request {}: {} ({}) vs {}", a.id, stop_reason_name(a.stop_reason),
                                                                a.error, stop_reason_name(b.stop_reason)));
      if (!(a.tokens == b.tokens)) RC_FAIL(fmt::format("{}: request {}: tokens differ with the prefix cache", policy, a.id));
    }
    RC_ASSERT(shared.outputs.size() == alone.outputs.size());
    for (const auto& [key, out] : alone.outputs) {
      const auto it = shared.outputs.find(key);
      RC_ASSERT(it != shared.outputs.end());
      if (!(same_bits(it->second, out))) RC_FAIL(fmt::format("{}: request {} position {} layer {} head {}: attention output differs", policy,
                                std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key)));
    }
    ++g_totals.runs;
    g_totals.hit_tokens += shared.stats.prefix_hit_tokens;
    g_totals.evictions += shared.stats.prefix_evictions;
    g_totals.recompute += shared.stats.preemptions_recompute;
    g_totals.swap += shared.stats.preemptions_swap;
    g_totals.peak_shared = std::max(g_totals.peak_shared, shared.stats.peak_shared_pages);
  });
  std::printf("%ld workloads: %ld prompt tokens from the cache, %ld evictions, %ld recompute and %ld swap "
              "preemptions, %ld pages shared at peak\n",
              static_cast<long>(g_totals.runs), static_cast<long>(g_totals.hit_tokens),
              static_cast<long>(g_totals.evictions), static_cast<long>(g_totals.recompute),
              static_cast<long>(g_totals.swap), static_cast<long>(g_totals.peak_shared));
  // The property is only as strong as what it exercised.
  EXPECT_GT(g_totals.hit_tokens, 0);
  EXPECT_GT(g_totals.evictions, 0);
  EXPECT_GT(g_totals.recompute, 0);
  EXPECT_GT(g_totals.swap, 0);
}

// A hit computes only the prompt's tail, over the cached pages: the logits are the whole
// prompt's, bit for bit, and so are the decode steps after it.
TEST(PrefixCacheEngine, HitPrefillIsTheWholePrefillBitForBit) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 23);
  for (const char* policy : {"full-fp32", "full-fp16", "int8", "int4:rotate=hadamard"}) {
    auto whole = engine_with(model, policy, 200);
    auto hit = engine_with(model, policy, 200);
    whole->runner->set_reusable_prefill(true);
    hit->runner->set_reusable_prefill(true);
    const std::int64_t a = hit->cache->manager().pool().tokens_per_page(kHighTier);
    const auto prompt = test_tokens(3 * a + 2, c.vocab_size, 9);
    // Another prompt with the same first two pages and a different tail holds the cached pages.
    std::vector<std::int32_t> other(prompt.begin(), prompt.begin() + 2 * a);
    for (int i = 0; i < 5; ++i) {
      other.push_back(static_cast<std::int32_t>((prompt[static_cast<std::size_t>(2 * a)] + 1 + i) % c.vocab_size));
    }
    hit->runner->prefill(7, other);
    hit->cache->reserve_prompt_after_prefix(7, 0, 2 * a, static_cast<std::int64_t>(prompt.size()));
    const std::vector<float> got = hit->runner->prefill_after_prefix(0, prompt, 2 * a);
    const std::vector<float> want = whole->runner->prefill(0, prompt);
    EXPECT_TRUE(same_bits(got, want)) << policy << ": prefill logits";
    hit->cache->release(7);  // the shared pages stay with request 0
    std::int32_t token = 5;
    for (std::int32_t pos = static_cast<std::int32_t>(prompt.size()); pos < static_cast<std::int32_t>(prompt.size()) + 4;
         ++pos) {
      const std::int64_t id = 0;
      const std::vector<float> g = hit->runner->decode({&id, 1}, {&token, 1}, {&pos, 1});
      const std::vector<float> w = whole->runner->decode({&id, 1}, {&token, 1}, {&pos, 1});
      EXPECT_TRUE(same_bits(g, w)) << policy << ": decode logits at position " << pos;
      token = static_cast<std::int32_t>((token * 7 + 3) % c.vocab_size);
    }
  }
}

// With the chain hash cut to one bit every page collides with half the others: the token
// comparison must turn every false match away (no hit between prompts that share no page), while
// prompts that do share pages still hit, and every request's tokens stay its own.
TEST(PrefixCacheEngine, CollidingHashesNeverHandOutAnotherPromptsPages) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 29);
  auto probe = engine_with(model, "full-fp16", 100);
  const std::int64_t a = probe->cache->manager().pool().tokens_per_page(kHighTier);
  std::vector<GenerationRequest> distinct;
  for (std::int64_t i = 0; i < 6; ++i) {
    GenerationRequest r;
    r.id = i;
    r.prompt = test_tokens(2 * a + 3, c.vocab_size, 100 + static_cast<std::uint64_t>(i));
    r.prompt[0] = static_cast<std::int32_t>(3 + i);  // no two prompts share a first page
    r.max_new_tokens = 4;
    r.stop_at_eos = false;
    r.arrival_step = i;  // each arrives after the one before has registered its pages
    distinct.push_back(r);
  }
  SchedulerConfig sc;
  sc.prefix_cache = true;
  sc.prefix_cache_hash_bits = 1;
  SchedulerConfig plain;
  const SchedulerRun colliding = run_scheduler(model, "full-fp16", 400, sc, distinct, true);
  const SchedulerRun alone = run_scheduler(model, "full-fp16", 400, plain, distinct, true);
  EXPECT_EQ(colliding.stats.prefix_hit_tokens, 0);
  for (std::size_t i = 0; i < distinct.size(); ++i) EXPECT_EQ(colliding.results[i].tokens, alone.results[i].tokens);
  // The same prompts again, later: every one hits its own two whole pages.
  std::vector<GenerationRequest> twice = distinct;
  for (GenerationRequest r : distinct) {
    r.id += 100;
    r.arrival_step += 20;
    twice.push_back(r);
  }
  const SchedulerRun again = run_scheduler(model, "full-fp16", 400, sc, twice, true);
  EXPECT_EQ(again.stats.prefix_hit_tokens, static_cast<std::int64_t>(distinct.size()) * 2 * a);
  for (std::size_t i = 0; i < distinct.size(); ++i) {
    EXPECT_EQ(again.results[i + distinct.size()].tokens, alone.results[i].tokens);
  }
}

// Parallel sampling: a request with n continuations shares its prompt's pages among them (copy-on-
// write from their first token) and is preempted and resumed as a unit, by recompute. Each
// sample's tokens must be those of a one-sample request with first_sample k, run alone on a pool
// that never preempts: the pages shared, copied or replayed change nothing.
TEST(PrefixCacheEngineProps, ForkedSamplesAreTheirSoloRuns) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 31);
  struct ForkTotals {
    long groups = 0, copies = 0, preemptions = 0, differing = 0;
  } totals;
  check_property("fork/samples are their solo runs", 150, [&] {
    const std::string policy = *rc::gen::element<std::string>("full-fp16", "int8", "int4:rotate=hadamard");
    std::vector<GenerationRequest> requests;
    const auto n = *rc::gen::inRange(1, 9);
    for (int i = 0; i < n; ++i) {
      GenerationRequest r;
      r.id = i;
      r.prompt = test_tokens(*rc::gen::inRange<std::int64_t>(1, 30), c.vocab_size, *rc::gen::arbitrary<std::uint32_t>());
      r.max_new_tokens = *rc::gen::inRange<std::int64_t>(1, 24);
      r.stop_at_eos = *rc::gen::arbitrary<bool>();
      r.arrival_step = *rc::gen::inRange<std::int64_t>(0, 4);
      r.n = *rc::gen::inRange<std::int64_t>(1, 5);
      r.first_sample = *rc::gen::inRange<std::int64_t>(0, 3);
      r.temperature = *rc::gen::element(0.0, 0.8, 1.5);
      r.top_p = *rc::gen::element(1.0, 0.9, 0.5);
      r.seed = *rc::gen::arbitrary<std::uint32_t>();
      requests.push_back(std::move(r));
    }
    SchedulerConfig sc;
    sc.max_batch = *rc::gen::inRange<std::int64_t>(1, 10);
    sc.preemption = *rc::gen::element(PreemptionMode::kRecompute, PreemptionMode::kSwap, PreemptionMode::kAuto);
    sc.prefix_cache = *rc::gen::arbitrary<bool>();
    std::int64_t longest = 0;
    const auto probe = engine_with(model, policy, 1);
    for (const GenerationRequest& r : requests) {
      longest = std::max(longest, r.n * probe->cache->request_pages(static_cast<std::int64_t>(r.prompt.size()) +
                                                                    r.max_new_tokens));
    }
    const std::int64_t pages = longest * *rc::gen::element<std::int64_t>(4, 5, 6, 100) / 4;
    const SchedulerRun group = run_scheduler(model, policy, pages, sc, requests, sc.prefix_cache);
    // Each sample alone: n = 1 at its index, the same reusable prefill or not.
    std::vector<GenerationRequest> solos;
    for (const GenerationRequest& r : requests) {
      for (std::int64_t k = 0; k < r.n; ++k) {
        GenerationRequest one = r;
        one.id = r.id * 100 + k;
        one.n = 1;
        one.first_sample = r.first_sample + k;
        solos.push_back(one);
      }
    }
    SchedulerConfig plain;
    plain.max_batch = 256;
    const SchedulerRun alone = run_scheduler(model, policy, 8000, plain, solos, sc.prefix_cache);
    std::size_t at = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const GenerationResult& g = group.results[i];
      if (g.stop_reason == StopReason::kError) RC_FAIL(fmt::format("request {} failed: {}", g.id, g.error));
      const std::int64_t count = requests[i].n;
      if (count > 1 && static_cast<std::int64_t>(g.samples.size()) != count) RC_FAIL("samples missing");
      std::set<std::vector<std::int32_t>> distinct;
      for (std::int64_t k = 0; k < count; ++k, ++at) {
        const std::vector<std::int32_t>& got = count > 1 ? g.samples[static_cast<std::size_t>(k)] : g.tokens;
        const GenerationResult& want = alone.results[at];
        if (got != want.tokens) {
          RC_FAIL(fmt::format("{}: request {} sample {} (n {}, temperature {}, top_p {}): tokens differ from its solo "
                              "run", policy, g.id, k, count, requests[i].temperature, requests[i].top_p));
        }
        if (count > 1 && g.sample_stop_reasons[static_cast<std::size_t>(k)] != want.stop_reason) {
          RC_FAIL(fmt::format("request {} sample {}: stop reason {} vs {}", g.id, k,
                              stop_reason_name(g.sample_stop_reasons[static_cast<std::size_t>(k)]),
                              stop_reason_name(want.stop_reason)));
        }
        distinct.insert(got);
      }
      if (count > 1) {
        ++totals.groups;
        RC_ASSERT(g.tokens == g.samples.front());
        totals.differing += distinct.size() > 1;
      }
    }
    totals.copies += group.stats.cow_copies;
    totals.preemptions += group.stats.preemptions_recompute + group.stats.preemptions_swap;
  });
  std::printf("%ld groups (%ld with differing samples), %ld copy-on-write copies, %ld preemptions\n", totals.groups,
              totals.differing, totals.copies, totals.preemptions);
  EXPECT_GT(totals.differing, 0);
  EXPECT_GT(totals.copies, 0);
  EXPECT_GT(totals.preemptions, 0);
}

TEST(PrefixCacheEngine, SamplingRequestsAreCheckedAtSubmission) {
  const ReferenceModel model = tiny_model(tiny_config(), 3);
  auto evicting = engine_with(model, "h2o", 100, 4096);
  Scheduler s(*evicting->runner, SchedulerConfig{});
  GenerationRequest r;
  r.prompt = {4, 5, 6};
  r.n = 3;
  s.submit(r);
  r.id = 1;
  r.n = 1;
  r.temperature = -1.0;
  s.submit(r);
  r.id = 2;
  r.temperature = 1.0;
  r.top_p = 0.0;
  s.submit(r);
  const std::vector<GenerationResult> results = s.run();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_NE(results[0].error.find("prefix-closed"), std::string::npos) << results[0].error;
  EXPECT_NE(results[1].error.find("temperature"), std::string::npos) << results[1].error;
  EXPECT_NE(results[2].error.find("top_p"), std::string::npos) << results[2].error;
}

TEST(PrefixCacheEngine, RefusesWhatCannotShare) {
  const ReferenceModel model = tiny_model(tiny_config(), 3);
  for (const char* policy : {"h2o", "kivi2", "fp8", "leankv"}) {
    auto e = engine_with(model, policy, 100, 4096);
    SchedulerConfig sc;
    sc.prefix_cache = true;
    expect_input_error([&] { Scheduler s(*e->runner, sc); }, {"policy", policy, "prefix-closed"});
  }
  auto e = engine_with(model, "int8", 100);
  SchedulerConfig sc;
  sc.prefix_cache = true;
  sc.reserve_tokens = 64;
  expect_input_error([&] { Scheduler s(*e->runner, sc); }, {"prefix cache", "paging"});
  SchedulerConfig ok;
  ok.prefix_cache = true;
  Scheduler s(*e->runner, ok);
  GenerationRequest r;
  r.id = PrefixPageCache::kHolderIds + 3;
  r.prompt = {4, 5};
  expect_input_error([&] { s.submit(r); }, {"prefix cache's own"});
}

}  // namespace
}  // namespace kvcheck
