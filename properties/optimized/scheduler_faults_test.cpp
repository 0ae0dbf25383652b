// Faults under the scheduler, each with its defined behaviour (scheduler.h): nothing is lost,
// a fault stays with its request, and the others' tokens equal their solo runs.
//   CancelQueuedAndRunning       cancel() ends a queued and a running request with the tokens
//                                they had, returns their pages; the rest finish as alone.
//   NanInOneRequestFailsOnlyIt   a NaN in one request's activations mid-decode (its own token's
//                                embedding row poisoned) fails it with a message naming the
//                                request, layer and position; the others finish as alone.
//   SwapBudgetFallsBackToRecompute  swap preemption with too little host memory recomputes
//                                instead; nothing is lost and tokens equal solo runs.
//   AutoPreemptionWeighsRecomputeAgainstSwap  auto recomputes when the forward over the context
//                                costs fewer FLOPs than the balance times the bytes a swap
//                                copies, swaps otherwise; a recompute's replay rides the batch.
//   BadRequestsAreAnsweredAtSubmission  empty prompts, prompts longer than the context, unknown
//                                token ids, duplicate ids.
//   RequestFillingThePoolRunsAloneOrFailsNeverWaits  a prompt whose next token never fits the
//                                pool runs alone, finishing or failing, and never waits forever.
// Pool exhaustion under a heavy workload is EngineProps.PreemptionPreservesEveryRequest.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "optimized/engine.h"
#include "optimized/scheduler.h"
#include "properties/support/model_fixtures.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::test_tokens;
using testing::tiny_config;
using testing::tiny_model;

std::unique_ptr<Engine> engine_with(const ReferenceModel& model, const std::string& policy, std::int64_t pages) {
  EngineOptions o;
  o.policy = policy;
  o.page_bytes = 512;
  o.pages = pages;
  o.threads = 2;
  o.poison = true;
  return make_engine(model, o);
}

std::vector<std::int32_t> solo(const ReferenceModel& model, const std::string& policy,
                               const std::vector<std::int32_t>& prompt, std::int64_t tokens) {
  auto e = engine_with(model, policy, 0);
  EngineGenerateOptions o;
  o.max_new_tokens = tokens;
  o.stop_at_eos = false;
  return engine_generate(*e, 0, prompt, o).generated;
}

GenerationRequest request(std::int64_t id, std::vector<std::int32_t> prompt, std::int64_t tokens) {
  GenerationRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_new_tokens = tokens;
  r.stop_at_eos = false;
  return r;
}

TEST(SchedulerFaults, CancelQueuedAndRunning) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 11);
  auto e = engine_with(model, "int8", 0);
  SchedulerConfig sc;
  sc.max_batch = 2;  // requests 2 and 3 queue behind 0 and 1
  Scheduler s(*e->runner, sc);
  std::vector<std::vector<std::int32_t>> prompts;
  for (std::int64_t i = 0; i < 4; ++i) {
    prompts.push_back(test_tokens(6 + 3 * i, c.vocab_size, 40 + static_cast<std::uint64_t>(i)));
    s.submit(request(i, prompts.back(), 12));
  }
  for (int k = 0; k < 4; ++k) s.step();
  ASSERT_EQ(s.running(), 2);
  ASSERT_EQ(s.waiting(), 2);
  EXPECT_TRUE(s.cancel(1));  // running, 5 tokens in
  EXPECT_TRUE(s.cancel(3));  // queued, never started
  EXPECT_FALSE(s.cancel(3)) << "cancelled twice";
  EXPECT_FALSE(s.cancel(99)) << "never submitted";
  EXPECT_EQ(s.running(), 1);
  EXPECT_EQ(s.waiting(), 1);
  const std::vector<GenerationResult> results = s.run();
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[1].stop_reason, StopReason::kCancelled);
  EXPECT_EQ(results[1].tokens.size(), 5u) << "one token at admission (from the prefill), then one per step";
  const std::vector<std::int32_t> solo1 = solo(model, "int8", prompts[1], 12);
  EXPECT_TRUE(std::equal(results[1].tokens.begin(), results[1].tokens.end(), solo1.begin()))
      << "the tokens a cancelled request had are its solo run's first ones";
  EXPECT_EQ(results[3].stop_reason, StopReason::kCancelled);
  EXPECT_TRUE(results[3].tokens.empty());
  for (const std::int64_t i : {0, 2}) {
    EXPECT_EQ(results[static_cast<std::size_t>(i)].stop_reason, StopReason::kMaxNewTokens);
    EXPECT_EQ(results[static_cast<std::size_t>(i)].tokens, solo(model, "int8", prompts[static_cast<std::size_t>(i)], 12))
        << "request " << i;
  }
  EXPECT_FALSE(s.cancel(0)) << "already finished";
  EXPECT_EQ(s.stats().cancelled, 2);
  EXPECT_EQ(e->cache->free_pages(), e->cache->pool_pages()) << "every page returned";
}

TEST(SchedulerFaults, NanInOneRequestFailsOnlyIt) {
  testing::TinyShape shape;
  shape.vocab = 512;  // room for a token that only request 0 ever sees
  const ModelConfig c = tiny_config(shape);
  const ReferenceModel model = tiny_model(c, 13);
  constexpr std::int64_t kTokens = 14, kRequests = 3;
  std::vector<std::vector<std::int32_t>> prompts, alone;
  for (std::int64_t i = 0; i < kRequests; ++i) {
    prompts.push_back(test_tokens(7 + 2 * i, c.vocab_size, 70 + static_cast<std::uint64_t>(i)));
    alone.push_back(solo(model, "full-fp32", prompts.back(), kTokens));
  }
  // The poisoned token: one that request 0 first meets as its generated token k (fed back at the
  // next step, so k + 1 < kTokens) and that no other request ever sees.
  const auto seen_by_others = [&](std::int32_t t) {
    for (std::int64_t i = 1; i < kRequests; ++i) {
      const auto& p = prompts[static_cast<std::size_t>(i)];
      const auto& g = alone[static_cast<std::size_t>(i)];
      if (std::count(p.begin(), p.end(), t) + std::count(g.begin(), g.end(), t) > 0) return true;
    }
    return false;
  };
  std::int64_t at = -1;
  for (std::int64_t k = 2; k + 1 < kTokens && at < 0; ++k) {
    const std::int32_t t = alone[0][static_cast<std::size_t>(k)];
    const bool earlier = std::count(prompts[0].begin(), prompts[0].end(), t) +
                             std::count(alone[0].begin(), alone[0].begin() + k, t) > 0;
    if (!earlier && !seen_by_others(t)) at = k;
  }
  ASSERT_GE(at, 0) << "no token of request 0 suits the test: change the seeds";
  const std::int32_t poison = alone[0][static_cast<std::size_t>(at)];

  // The engine reads the embedding in place from the checkpoint: poison the row there.
  const ReferenceModel poisoned =
      testing::tiny_model_edited(c, 13, "model.embed_tokens.weight", [&](std::vector<float>& w) {
        std::fill(w.begin() + poison * c.hidden_size, w.begin() + (poison + 1) * c.hidden_size, std::nanf(""));
      });
  auto e = engine_with(poisoned, "full-fp32", 0);
  std::vector<std::string> log;
  SchedulerConfig sc;
  sc.log = [&](const std::string& line) { log.push_back(line); };
  Scheduler s(*e->runner, sc);
  for (std::int64_t i = 0; i < kRequests; ++i) s.submit(request(i, prompts[static_cast<std::size_t>(i)], kTokens));
  const std::vector<GenerationResult> results = s.run();
  ASSERT_EQ(results.size(), static_cast<std::size_t>(kRequests));
  EXPECT_EQ(results[0].stop_reason, StopReason::kError);
  const std::string& m = results[0].error;
  EXPECT_NE(m.find("request 0"), std::string::npos) << m;
  EXPECT_NE(m.find("layer 0"), std::string::npos) << m;
  // The poisoned token is fed at the step after it was generated: position prompt + at + 1 - 1.
  const auto position = static_cast<std::int64_t>(prompts[0].size()) + at;
  EXPECT_NE(m.find("position " + std::to_string(position)), std::string::npos) << m;
  EXPECT_EQ(results[0].tokens.size(), static_cast<std::size_t>(at + 1)) << "the tokens it had are kept";
  for (std::int64_t i = 1; i < kRequests; ++i) {
    EXPECT_EQ(results[static_cast<std::size_t>(i)].stop_reason, StopReason::kMaxNewTokens) << results[static_cast<std::size_t>(i)].error;
    EXPECT_EQ(results[static_cast<std::size_t>(i)].tokens, alone[static_cast<std::size_t>(i)]) << "request " << i;
  }
  EXPECT_EQ(s.stats().request_faults, 1);
  EXPECT_EQ(e->cache->free_pages(), e->cache->pool_pages());
}

// A prompt that fills the pool exactly, so that its next token never fits: admitted alone, it
// finishes when it needs no more room, and otherwise fails naming why; it never waits forever
// (waiting for pages that cannot come is a livelock), nor does a request asking for no token wait
// for pages it will not use.
TEST(SchedulerFaults, RequestFillingThePoolRunsAloneOrFailsNeverWaits) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 23);
  std::int64_t tokens = 1;  // the longest prompt whose pages are all full
  {
    auto probe = engine_with(model, "int8", 0);
    while (probe->cache->request_pages(tokens + 1) == probe->cache->request_pages(tokens)) ++tokens;
  }
  auto e = engine_with(model, "int8", 0);
  const std::int64_t pool = e->cache->request_pages(tokens);
  e = engine_with(model, "int8", pool);
  ASSERT_GT(e->cache->request_pages(tokens + 1), e->cache->pool_pages());
  const std::vector<std::int32_t> prompt = test_tokens(tokens, c.vocab_size, 3);
  Scheduler s(*e->runner, SchedulerConfig{});
  s.submit(request(1, prompt, 1));  // its one token comes from the prefill: no page more
  s.submit(request(2, prompt, 3));  // its second token needs a slot the pool does not have
  s.submit(request(3, prompt, 0));
  std::int64_t steps = 0;
  while (s.step()) ASSERT_LT(++steps, 100) << "a request waits forever";
  const std::vector<GenerationResult> results = s.run();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].stop_reason, StopReason::kMaxNewTokens) << results[0].error;
  EXPECT_EQ(results[0].tokens, solo(model, "int8", prompt, 1));
  EXPECT_EQ(results[1].stop_reason, StopReason::kError);
  EXPECT_NE(results[1].error.find("request 2: cannot grow even alone"), std::string::npos) << results[1].error;
  EXPECT_EQ(results[1].tokens, solo(model, "int8", prompt, 1)) << "the token it had is kept";
  EXPECT_EQ(results[2].stop_reason, StopReason::kMaxNewTokens) << results[2].error;
  EXPECT_TRUE(results[2].tokens.empty());
  EXPECT_EQ(e->cache->free_pages(), e->cache->pool_pages());
}

// Six requests of 20 + 30 tokens in a full-fp16 pool of about two and a half of them: the batch
// must preempt. run() serves them under `sc` and checks what every preemption mode owes: each
// request's tokens equal its solo run, nothing is left swapped out or in the pool.
struct CrowdedWorkload {
  static constexpr std::int64_t kRequests = 6, kTokens = 30;
  ModelConfig c = tiny_config();
  ReferenceModel model = tiny_model(c, 17);
  std::vector<std::vector<std::int32_t>> prompts;
  std::int64_t pages = 0;
  CrowdedWorkload() {
    for (std::int64_t i = 0; i < kRequests; ++i) prompts.push_back(test_tokens(20, c.vocab_size, 90 + static_cast<std::uint64_t>(i)));
    pages = engine_with(model, "full-fp16", 0)->cache->request_pages(20 + kTokens) * 5 / 2;
  }
  // The run's statistics; its log lines into `log`.
  SchedulerStats run(SchedulerConfig sc, std::vector<std::string>& log, const std::string& label) const {
    auto e = engine_with(model, "full-fp16", pages);
    sc.log = [&](const std::string& line) { log.push_back(line); };
    Scheduler s(*e->runner, sc);
    for (std::int64_t i = 0; i < kRequests; ++i) s.submit(request(i, prompts[static_cast<std::size_t>(i)], kTokens));
    const std::vector<GenerationResult> results = s.run();
    for (std::int64_t i = 0; i < kRequests; ++i) {
      EXPECT_EQ(results[static_cast<std::size_t>(i)].tokens, solo(model, "full-fp16", prompts[static_cast<std::size_t>(i)], kTokens))
          << label << ", request " << i << ": " << results[static_cast<std::size_t>(i)].error;
    }
    EXPECT_EQ(s.swap_held_bytes(), 0) << label;
    EXPECT_EQ(e->cache->free_pages(), e->cache->pool_pages()) << label;
    return s.stats();
  }
};

TEST(SchedulerFaults, SwapBudgetFallsBackToRecompute) {
  const CrowdedWorkload w;
  for (const std::int64_t budget : {std::int64_t{1}, std::int64_t{0}}) {
    std::vector<std::string> log;
    SchedulerConfig sc;
    sc.preemption = PreemptionMode::kSwap;
    sc.max_swap_bytes = budget;  // 1 byte: no swap fits; 0: unbounded
    const SchedulerStats st = w.run(sc, log, fmt::format("budget {}", budget));
    if (budget == 1) {
      EXPECT_EQ(st.preemptions_swap, 0);
      EXPECT_GT(st.preemptions_recompute, 0);
      EXPECT_EQ(st.swap_budget_recomputes, st.preemptions_recompute);
      EXPECT_TRUE(std::any_of(log.begin(), log.end(), [](const std::string& l) {
        return l.find("max_swap_bytes") != std::string::npos;
      }));
    } else {
      EXPECT_GT(st.preemptions_swap, 0) << "the unbounded run must swap, or the test shows nothing";
      EXPECT_EQ(st.swap_budget_recomputes, 0);
    }
  }
}

// kAuto weighs the two costs (scheduler.h): recompute = 2 x the layers' weights x (context - 1)
// FLOPs, swap = the bytes held copied out and back, at recompute_flops_per_swap_byte. The first
// preemption of a workload happens at the same point whatever the balance, so a balance just
// above its FLOPs over bytes recomputes it and one just below swaps it. Also: a recompute feeds
// the generated tokens again as rows of the running batch (replayed_rows), and every request
// still ends with its solo tokens.
TEST(SchedulerFaults, AutoPreemptionWeighsRecomputeAgainstSwap) {
  const CrowdedWorkload w;
  const ModelConfig& c = w.c;
  // The layers' projection weights, counted from the config (not from the engine's matrices).
  const double weights = static_cast<double>(c.num_hidden_layers) *
                         static_cast<double>(c.hidden_size * c.q_dim() * 2 + c.hidden_size * c.kv_dim() * 2 +
                                             c.hidden_size * c.intermediate_size * 3);
  struct Run {
    std::string first;  // the first preemption's log line
    SchedulerStats stats;
  };
  const auto run = [&](double balance) {
    std::vector<std::string> log;
    SchedulerConfig sc;
    sc.preemption = PreemptionMode::kAuto;
    sc.recompute_flops_per_swap_byte = balance;
    const SchedulerStats st = w.run(sc, log, fmt::format("balance {}", balance));
    const auto it = std::find_if(log.begin(), log.end(), [](const std::string& l) { return l.find("preempt request") != std::string::npos; });
    return Run{it == log.end() ? std::string() : *it, st};
  };
  const Run probe_run = run(8.0);
  ASSERT_FALSE(probe_run.first.empty()) << "the workload must preempt";
  // "step S: preempt request R by MODE: context N tokens, B bytes held, ..."
  long long step = 0, id = 0, ctx = 0, held = 0;
  char mode[16] = {};
  ASSERT_EQ(std::sscanf(probe_run.first.c_str(), "step %lld: preempt request %lld by %15[a-z]: context %lld tokens, %lld bytes held", &step,
                        &id, mode, &ctx, &held),
            5)
      << probe_run.first;
  const double flops = 2.0 * weights * static_cast<double>(ctx - 1);
  EXPECT_NE(probe_run.first.find(fmt::format("recompute {:.6g} FLOPs against swap {:.6g} bytes", flops, 2.0 * static_cast<double>(held))),
            std::string::npos)
      << probe_run.first;
  const double ratio = flops / (2.0 * static_cast<double>(held));
  const Run above = run(ratio * 1.01), below = run(ratio * 0.99);
  EXPECT_NE(above.first.find("by recompute"), std::string::npos) << above.first;
  EXPECT_NE(below.first.find("by swap"), std::string::npos) << below.first;
  EXPECT_GT(above.stats.preemptions_recompute, 0);
  EXPECT_GT(above.stats.replayed_rows, 0) << "a recompute feeds its generated tokens again as decode rows";
  EXPECT_LE(above.stats.replayed_rows, above.stats.recomputed_tokens);
  EXPECT_GT(below.stats.preemptions_swap, 0);
  // Generated tokens are counted once, replays beside them.
  EXPECT_EQ(above.stats.decode_tokens, below.stats.decode_tokens);
}

TEST(SchedulerFaults, BadRequestsAreAnsweredAtSubmission) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 19);
  auto e = engine_with(model, "int8", 0);
  Scheduler s(*e->runner, SchedulerConfig{});
  s.submit(request(1, {}, 4));
  s.submit(request(2, test_tokens(c.max_position_embeddings + 1, c.vocab_size, 2), 4));
  s.submit(request(3, {1, static_cast<std::int32_t>(c.vocab_size) + 5, 2}, 4));
  s.submit(request(4, test_tokens(5, c.vocab_size, 4), 4));
  // Never runs a forward (no token asked), and is still refused for its unknown token at once:
  // already answered, so there is nothing to cancel (it must not end as finished).
  s.submit(request(6, {static_cast<std::int32_t>(c.vocab_size)}, 0));
  EXPECT_FALSE(s.cancel(6));
  try {
    s.submit(request(4, test_tokens(5, c.vocab_size, 5), 4));
    FAIL() << "a duplicate id was accepted";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("request 4: id submitted twice"), std::string::npos) << err.what();
  }
  const std::vector<GenerationResult> results = s.run();
  ASSERT_EQ(results.size(), 5u) << "one result per accepted id";
  EXPECT_NE(results[0].error.find("request 1: empty prompt"), std::string::npos) << results[0].error;
  EXPECT_NE(results[1].error.find("exceeds max_position_embeddings"), std::string::npos) << results[1].error;
  EXPECT_EQ(results[2].stop_reason, StopReason::kError);
  EXPECT_EQ(results[2].error, fmt::format("request 3: token {} at position 1 is outside the vocabulary [0, {})",
                                         c.vocab_size + 5, c.vocab_size))
      << "named once";
  EXPECT_EQ(results[3].stop_reason, StopReason::kMaxNewTokens);
  EXPECT_EQ(results[3].tokens, solo(model, "int8", test_tokens(5, c.vocab_size, 4), 4))
      << "the duplicate changed nothing";
  EXPECT_EQ(results[4].error, fmt::format("request 6: token {} at position 0 is outside the vocabulary [0, {})",
                                         c.vocab_size, c.vocab_size));
  EXPECT_EQ(e->cache->free_pages(), e->cache->pool_pages());
}

}  // namespace
}  // namespace kvcheck
