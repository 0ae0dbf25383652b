// One run of the serving benchmark (bench/serving_run.h) on a tiny random model: nothing is lost,
// the counts add up, the contiguous baseline reserves each request's own prompt + output cap (so
// as many run together as those reservations allow, no more), paging admits more than whole-context
// reservations would under the same budget, and the time metrics are ordered as their definitions
// make them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "bench/serving_run.h"
#include "optimized/engine.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::tiny_config;
using testing::tiny_model;

std::vector<ServingRequest> workload(const ModelConfig& c, std::int64_t n, double rate) {
  ServingWorkloadConfig wc;
  wc.name = "chat";
  wc.requests = n;
  wc.seed = 3;
  wc.max_context = c.max_position_embeddings;
  wc.rate = rate;
  std::vector<ServingRequest> rs = make_serving_workload(wc);
  fill_prompts(rs, testing::test_tokens(4096, c.vocab_size, 9), 1, 3);
  return rs;
}

ServingRunConfig run_config(const std::string& policy, bool contiguous, std::int64_t budget) {
  ServingRunConfig r;
  r.label = contiguous ? "contiguous" : policy;
  r.policy = policy;
  r.contiguous = contiguous;
  r.kv_budget_bytes = budget;
  r.page_bytes = 1024;
  r.threads = 1;
  return r;
}

TEST(ServingRun, NothingLostAndTheCountsAddUp) {
  const ModelConfig c = tiny_config({.max_positions = 256});
  const ReferenceModel model = tiny_model(c, 5);
  const std::vector<ServingRequest> rs = workload(c, 24, 0.0);
  std::int64_t asked = 0;
  for (const ServingRequest& r : rs) asked += r.output_tokens;
  // The budget: the pages of 3 full-context requests.
  auto probe = make_engine(model, EngineOptions{.policy = "full-fp16", .pages = 1, .page_bytes = 1024});
  const std::int64_t per_request = probe->cache->request_pages(c.max_position_embeddings);
  const std::int64_t budget = 3 * per_request * 1024;
  // The contiguous baseline's reservations: each request's prompt + output cap, in pages.
  std::vector<std::int64_t> reservation;
  for (const ServingRequest& q : rs) {
    reservation.push_back(probe->cache->request_pages(
        std::min<std::int64_t>(static_cast<std::int64_t>(q.prompt.size()) + q.output_tokens, c.max_position_embeddings)));
  }
  std::int64_t first_fit = 0, most_fit = 0;  // the arrival-order prefix that fits; the most that can
  for (std::int64_t used = 0; first_fit < 24 && used + reservation[first_fit] <= budget / 1024; ++first_fit) {
    used += reservation[first_fit];
  }
  std::vector<std::int64_t> smallest = reservation;
  std::sort(smallest.begin(), smallest.end());
  for (std::int64_t used = 0; most_fit < 24 && used + smallest[most_fit] <= budget / 1024; ++most_fit) {
    used += smallest[most_fit];
  }
  for (const auto& [policy, contiguous] : std::vector<std::pair<std::string, bool>>{
           {"full-fp16", true}, {"full-fp16", false}, {"int8", false}, {"h2o:budget=32", false}}) {
    const ServingResult r = run_serving(model, run_config(policy, contiguous, budget), rs);
    SCOPED_TRACE(r.label);
    EXPECT_EQ(r.requests_submitted, 24);
    EXPECT_EQ(r.requests_completed, 24) << (r.errors.empty() ? "" : r.errors.front());
    EXPECT_EQ(r.requests_failed, 0);
    EXPECT_EQ(r.requests_refused, 0);
    EXPECT_TRUE(r.all_completed());
    EXPECT_EQ(r.tokens_requested, asked);
    EXPECT_EQ(r.output_tokens, asked) << "EOS is ignored: every request generates what it asked for";
    EXPECT_EQ(r.pool_pages, budget / 1024);
    EXPECT_LE(r.peak_kv_bytes, budget);
    EXPECT_GT(r.peak_kv_bytes, 0);
    EXPECT_GE(r.fragmentation.p50, 0.0);
    EXPECT_LE(r.fragmentation.p99, 1.0);
    EXPECT_LE(r.fragmentation.p50, r.fragmentation.p99);
    EXPECT_GE(r.mean_batch_size, 1.0);
    EXPECT_LE(r.mean_batch_size, static_cast<double>(r.max_batch_seen));
    EXPECT_EQ(r.ttft_s.count, 24);
    EXPECT_EQ(r.itl_s.count, asked - 24) << "one gap between each pair of a request's tokens";
    EXPECT_LE(r.ttft_s.p50, r.ttft_s.p99);
    EXPECT_GE(r.ttft_s.p50, 0.0);
    EXPECT_GT(r.output_tokens_per_s, 0.0);
    EXPECT_LE(r.makespan_s, r.wall_s + r.skipped_idle_s + 1e-9);
    // Generation: every token but each request's first comes from a decode step (fewer when a
    // preemption by recompute gives one from a prefill again), timed inside the run.
    EXPECT_LE(r.decode_tokens, asked - 24);
    EXPECT_GT(r.decode_tokens, (asked - 24) / 2);
    EXPECT_GT(r.generation_s, 0.0);
    EXPECT_LE(r.generation_s, r.wall_s);
    EXPECT_DOUBLE_EQ(r.generation_tokens_per_s, static_cast<double>(r.decode_tokens) / r.generation_s);
    // The roofline's inputs: the weights a step reads, and the stored KV at its decode steps.
    EXPECT_EQ(r.weight_bytes, decode_weight_bytes(probe->weights));
    EXPECT_GT(r.mean_kv_slots, 0.0);
    if (policy != "h2o:budget=32") {
      // One tier: every slot at the page's bytes over its tokens in the policy's format.
      auto format = make_engine(model, EngineOptions{.policy = policy, .pages = 1, .page_bytes = 1024});
      const double slot_bytes = 1024.0 / static_cast<double>(format->cache->manager().pool().tokens_per_page(0));
      EXPECT_NEAR(r.mean_kv_bytes / r.mean_kv_slots, slot_bytes, 1e-12 * slot_bytes);
      if (policy == "int8") {
        EXPECT_LT(slot_bytes, 1024.0 / static_cast<double>(probe->cache->manager().pool().tokens_per_page(0)));
      }
    }
    if (contiguous) {
      // Each request reserves its own prompt + output cap: the first `first_fit` requests (all
      // arrive at once) run together at the first step, no more than `most_fit` ever do, nothing
      // is preempted, and the reservations never pass the pool.
      EXPECT_GE(r.max_batch_seen, first_fit);
      EXPECT_LE(r.max_batch_seen, most_fit);
      EXPECT_EQ(r.preemptions_recompute + r.preemptions_swap, 0);
      EXPECT_GT(r.fragmentation.p99, 0.0) << "a request fills its reservation as it generates";
    } else {
      EXPECT_GT(r.max_batch_seen, 3) << "paging admits more requests than the contiguous reservations";
    }
  }
}

// The shared-prefix workload with the prefix cache against its --no-prefix-cache baseline: the
// same requests and generated tokens; the cache computes only what it does not hold, so the prompt
// tokens it computed plus those it took add up to the baseline's, and it takes some.
TEST(ServingRun, PrefixCacheSavesPrefillOnASharedPrefix) {
  const ModelConfig c = tiny_config({.max_positions = 256});
  const ReferenceModel model = tiny_model(c, 5);
  ServingWorkloadConfig wc;
  wc.name = "shared-prefix";
  wc.requests = 12;
  wc.seed = 3;
  wc.max_context = c.max_position_embeddings;
  std::vector<ServingRequest> rs = make_serving_workload(wc);
  fill_prompts(rs, testing::test_tokens(4096, c.vocab_size, 9), 1, 3);
  for (const char* policy : {"full-fp16", "int8"}) {
    ServingRunConfig on = run_config(policy, false, 1 << 22);
    on.prefix_cache = true;
    ServingRunConfig off = run_config(policy, false, 1 << 22);
    off.reusable_prefill = true;
    const ServingResult cached = run_serving(model, on, rs);
    const ServingResult baseline = run_serving(model, off, rs);
    ASSERT_TRUE(cached.all_completed() && baseline.all_completed()) << policy;
    EXPECT_EQ(cached.output_tokens, baseline.output_tokens) << policy;
    EXPECT_EQ(baseline.prefix_hit_tokens, 0) << policy;
    EXPECT_GT(cached.prefix_hit_tokens, 0) << policy;
    EXPECT_EQ(cached.prefill_tokens + cached.prefix_hit_tokens, baseline.prefill_tokens) << policy;
    EXPECT_GT(cached.peak_shared_pages, 0) << policy;
    EXPECT_LE(cached.peak_kv_bytes, baseline.peak_kv_bytes) << policy << ": shared pages are held once";
  }
}

TEST(ServingRun, ArrivalsAreWaitedForAndIdleTimeSkipped) {
  const ModelConfig c = tiny_config({.max_positions = 128});
  const ReferenceModel model = tiny_model(c, 5);
  // Two requests a second: far slower than the engine serves them, so it idles between arrivals.
  const std::vector<ServingRequest> rs = workload(c, 6, 2.0);
  const ServingResult r = run_serving(model, run_config("full-fp16", false, 1 << 20), rs);
  EXPECT_EQ(r.requests_completed, 6);
  EXPECT_GT(r.skipped_idle_s, 0.5 * rs.back().arrival_s) << "idle gaps are jumped over, not slept";
  EXPECT_GE(r.makespan_s, rs.back().arrival_s) << "the last request cannot finish before it arrives";
  EXPECT_LT(r.wall_s, r.makespan_s);
  EXPECT_LE(r.ttft_s.p99, 1.0) << "each request is served when it arrives, not when the run began";
}

TEST(ServingRun, RejectsABudgetBelowOnePage) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 5);
  const std::vector<ServingRequest> rs = workload(c, 2, 0.0);
  testing::expect_input_error([&] { run_serving(model, run_config("full-fp16", false, 100), rs); }, {"--kv-budget"});
  testing::expect_input_error([&] { run_serving(model, run_config("no-such-policy", false, 1 << 20), rs); },
                              {"no-such-policy"});
}

// A contiguous reservation is the request's own maximum length (prompt + output cap), not the
// cache's: one that exceeds the pool is refused at submission, naming both; a short one runs.
TEST(ServingRun, AReservationLargerThanThePoolIsRejectedAtSubmission) {
  const ModelConfig c = tiny_config({.max_positions = 256});
  const ReferenceModel model = tiny_model(c, 5);
  auto engine = make_engine(model, EngineOptions{.policy = "full-fp16", .pages = 20, .page_bytes = 1024});
  ASSERT_GT(engine->cache->request_pages(256), 20);
  ASSERT_LE(engine->cache->request_pages(100), 20);
  SchedulerConfig sc;
  sc.reserve_tokens = 256;  // the cache's longest sequence
  Scheduler s(*engine->runner, sc);
  // Request 5 asks for 4 + 250 tokens: its reservation (254 tokens) cannot fit the pool. Request 6
  // asks for 4 + 2: it reserves 6 tokens, not the cache's whole 256, and runs.
  s.submit({5, testing::test_tokens(4, c.vocab_size, 1), 250, false, 0});
  s.submit({6, testing::test_tokens(4, c.vocab_size, 2), 2, false, 0});
  const std::vector<GenerationResult> r = s.run();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].stop_reason, StopReason::kError);
  EXPECT_NE(r[0].error.find("request 5"), std::string::npos) << r[0].error;
  EXPECT_NE(r[0].error.find("contiguous reservation of 254 tokens (prompt 4 + output cap 250, at most 256)"),
            std::string::npos)
      << r[0].error;
  EXPECT_NE(r[1].stop_reason, StopReason::kError) << r[1].error;
  EXPECT_EQ(r[1].tokens.size(), 2u);
  EXPECT_EQ(engine->cache->free_pages(), 20);
  sc.reserve_tokens = -1;
  EXPECT_THROW(Scheduler(*engine->runner, sc), InputError);
}

// A request that can never run is counted as refused (at submission) as well as failed; one that
// fails after admission only as failed. Either way the result says its rates are partial.
TEST(ServingRun, RefusedAndFailedRequestsAreCountedApart) {
  const ModelConfig c = tiny_config({.max_positions = 256});
  const ReferenceModel model = tiny_model(c, 5);
  auto probe = make_engine(model, EngineOptions{.policy = "full-fp16", .pages = 1, .page_bytes = 1024});
  const std::int64_t pool = probe->cache->request_pages(100);  // a pool of 100 tokens' pages
  ASSERT_GT(probe->cache->request_pages(40 + 200), pool);
  ASSERT_LE(probe->cache->request_pages(40), pool);
  // Three short requests, and one whose prompt fits the pool but whose prompt + output does not.
  std::vector<ServingRequest> rs;
  for (std::int64_t i = 0; i < 4; ++i) {
    ServingRequest q;
    q.id = i;
    q.prompt_tokens = i < 3 ? 12 : 40;
    q.output_tokens = i < 3 ? 4 : 200;
    q.prompt = testing::test_tokens(q.prompt_tokens, c.vocab_size, static_cast<std::uint64_t>(i));
    rs.push_back(q);
  }
  const ServingResult contiguous = run_serving(model, run_config("full-fp16", true, pool * 1024), rs);
  EXPECT_EQ(contiguous.requests_refused, 1) << "its reservation can never fit: refused at submission";
  EXPECT_EQ(contiguous.requests_failed, 1);
  EXPECT_EQ(contiguous.requests_completed, 3);
  EXPECT_FALSE(contiguous.all_completed());
  const ServingResult paged = run_serving(model, run_config("full-fp16", false, pool * 1024), rs);
  EXPECT_EQ(paged.requests_refused, 0) << "paging admits it: its prompt fits";
  EXPECT_EQ(paged.requests_failed, 1) << "and fails it when it cannot grow even alone";
  EXPECT_EQ(paged.requests_completed, 3);
  EXPECT_FALSE(paged.all_completed());
}

// A resident backend's run carries its transfer ledger (the CPU backend's none), and serves the
// same tokens: the mirrored host twin stands in for the device here.
TEST(ServingRun, AResidentRunCarriesItsTransferLedger) {
  const ModelConfig c = tiny_config({.max_positions = 256});
  const ReferenceModel model = tiny_model(c, 5);
  const std::vector<ServingRequest> rs = workload(c, 6, 0.0);
  ServingRunConfig cpu = run_config("int8", false, 64 * 1024 * 1024);
  ServingRunConfig twin = cpu;
  twin.device = "host-twin-mirrored";
  const ServingResult a = run_serving(model, cpu, rs);
  const ServingResult b = run_serving(model, twin, rs);
  EXPECT_FALSE(a.transfers.has_value());
  ASSERT_TRUE(b.transfers.has_value());
  EXPECT_EQ(b.output_tokens, a.output_tokens);
  EXPECT_EQ(b.decode_steps, a.decode_steps);
  const TransferCounts& t = *b.transfers;
  EXPECT_GT(t.of(Direction::kToDevice, Transfer::kWeights), 0);
  EXPECT_GT(t.of(Direction::kToDevice, Transfer::kKv), 0);  // the pages the steps wrote, copied
  // Every decode step's tokens and positions, 4 bytes a row each.
  EXPECT_EQ(t.of(Direction::kToDevice, Transfer::kTokens), 4 * b.decode_tokens);
  EXPECT_EQ(t.of(Direction::kToDevice, Transfer::kPositions), 4 * b.decode_tokens);
  EXPECT_EQ(t.of(Direction::kToHost, Transfer::kLogits) % (4 * c.vocab_size), 0);
  EXPECT_GT(t.of(Direction::kToHost, Transfer::kLogits), 0);
}

TEST(ServingRun, MeanAndSampleStandardDeviation) {
  const std::vector<double> v = {2, 4, 4, 4, 5, 5, 7, 9};
  const MeanSd m = mean_sd(v);
  EXPECT_DOUBLE_EQ(m.mean, 5.0);
  EXPECT_DOUBLE_EQ(m.sd, std::sqrt(32.0 / 7.0));  // squares about the mean sum to 32, over n - 1
  const std::vector<double> one = {3.5};
  EXPECT_DOUBLE_EQ(mean_sd(one).mean, 3.5);
  EXPECT_EQ(mean_sd(one).sd, 0.0);
  EXPECT_EQ(mean_sd(std::vector<double>{}).mean, 0.0);
}

}  // namespace
}  // namespace kvcheck
