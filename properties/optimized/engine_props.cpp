// Properties of the optimized engine on the CPU backend, on small random models:
//
//   BatchInvariance  a request's logits are bit-identical whether it runs alone or in a decode
//                    batch with any mix of other requests, of any lengths, joining at any step;
//   Preemption       under a page pool too small for the workload, every request completes
//                    exactly once and its tokens equal its solo run, for recompute, swap and the
//                    automatic rule; the pool is empty at the end.
// Both run the uniform and the eviction policies (swap: uniform only, see scheduler.h).
//
// Reproduce a failure with the seed it prints:
//   RC_PARAMS="seed=N" build/properties/kvcheck_property_tests --gtest_filter='EngineProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>

#include "optimized/engine.h"
#include "optimized/scheduler.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;

struct Workload {
  testing::TinyShape shape;
  std::uint64_t model_seed = 0;
  std::string policy;
  std::int64_t page_bytes = 0;
  bool qwen3 = false;  // Qwen3 (per-head q/k norms) instead of Llama
};

ModelConfig config_of(const Workload& w) {
  ModelConfig c = testing::tiny_config(w.shape);
  if (w.qwen3) c.family = ModelFamily::kQwen3;
  return c;
}

// evicting: also draw the eviction policies (they preempt by recompute only).
rc::Gen<Workload> gen_workload(bool evicting = true) {
  return rc::gen::exec([evicting] {
    Workload w;
    w.shape.layers = *rc::gen::inRange<std::int64_t>(1, 3);
    w.shape.kv_heads = *rc::gen::element<std::int64_t>(1, 2);
    w.shape.heads = w.shape.kv_heads * *rc::gen::element<std::int64_t>(1, 2, 4);
    w.shape.head_dim = *rc::gen::element<std::int64_t>(8, 16);
    w.shape.hidden = w.shape.heads * 8;
    w.shape.intermediate = 48;
    w.shape.vocab = 40;
    w.shape.max_positions = 96;
    w.model_seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
    w.policy = evicting ? *rc::gen::element<std::string>("full-fp32", "full-fp16", "int8", "int4",
                                                         "streaming:sinks=2,window=6", "h2o:budget=8,recent=0.25",
                                                         "snapkv:budget=10,window=4,pool=3",
                                                         "pyramidkv:budget=8,ratio=4,window=2,pool=3",
                                                         "leankv:alpha_h=1,alpha_l=0.3,window=4",
                                                         "xkv:budget=8,window=2,pool=3", "fp8",
                                                         "kivi2:group=16,residual=16",
                                                         "minikv:budget=8,residual=16,value_group=8",
                                                         "spvllm:budget=8,recent=0.25,strategy=no-op",
                                                         "spvllm:budget=8,recent=0.25,strategy=free-block",
                                                         "spvllm:budget=8,recent=0.25,strategy=sparse-copy")
                        : *rc::gen::element<std::string>("full-fp32", "full-fp16", "fp8", "int8", "int4");
    // Small pages, so that requests span several pages and awkward token counts per page occur
    // (a per-channel key group of 16 tokens needs a larger one).
    w.page_bytes = *rc::gen::element<std::int64_t>(256, 512, 1024);
    if (w.policy.starts_with("kivi") || w.policy.starts_with("minikv")) w.page_bytes *= 4;
    w.qwen3 = *rc::gen::arbitrary<bool>();
    return w;
  });
}

std::unique_ptr<Engine> engine_for(const ReferenceModel& model, const Workload& w, std::int64_t pages) {
  EngineOptions o;
  o.policy = w.policy;
  o.page_bytes = w.page_bytes;
  o.pages = pages;
  o.threads = 2;
  o.poison = true;  // free pages and dead slots hold NaN: any read of them shows in the logits
  return make_engine(model, o);
}

// Logits of one request's prefill and decode steps, bit for bit.
using Rows = std::vector<std::vector<float>>;

TEST(EngineProps, BatchInvariance) {
  check_property("engine batch invariance", 60, [] {
    const Workload w = *gen_workload();
    const ModelConfig config = config_of(w);
    const ReferenceModel model = testing::tiny_model(config, w.model_seed);
    const auto vocab = static_cast<std::size_t>(config.vocab_size);
    const std::int64_t requests = *rc::gen::inRange<std::int64_t>(2, 6);
    const std::int64_t steps = *rc::gen::inRange<std::int64_t>(1, 12);
    std::vector<std::vector<std::int32_t>> prompts;
    std::vector<std::int64_t> joins;  // the decode step at which each request is prefilled
    std::vector<std::vector<std::int32_t>> fed;  // tokens fed at each decode step (random, fixed)
    for (std::int64_t r = 0; r < requests; ++r) {
      const auto len = *rc::gen::inRange<std::int64_t>(1, 40);
      prompts.push_back(testing::test_tokens(len, config.vocab_size, w.model_seed + static_cast<std::uint64_t>(r)));
      joins.push_back(r == 0 ? 0 : *rc::gen::inRange<std::int64_t>(0, steps));
      fed.push_back(testing::test_tokens(steps, config.vocab_size, w.model_seed + 100 + static_cast<std::uint64_t>(r)));
    }
    // Solo: request 0 alone.
    Rows solo;
    {
      auto e = engine_for(model, w, 4096);
      solo.push_back(e->runner->prefill(0, prompts[0]));
      for (std::int64_t s = 0; s < steps; ++s) {
        const std::int64_t id = 0;
        const auto pos = static_cast<std::int32_t>(prompts[0].size() + static_cast<std::size_t>(s));
        solo.push_back(e->runner->decode({&id, 1}, {&fed[0][static_cast<std::size_t>(s)], 1}, {&pos, 1}));
      }
    }
    // Batched: the others join at their steps; request 0's rows are compared.
    auto e = engine_for(model, w, 4096);
    Rows batched;
    std::map<std::int64_t, std::int64_t> decoded;  // request -> decode steps done
    for (std::int64_t s = 0; s <= steps; ++s) {
      for (std::int64_t r = 0; r < requests; ++r) {
        if (joins[static_cast<std::size_t>(r)] == s && s < steps) {
          auto logits = e->runner->prefill(r, prompts[static_cast<std::size_t>(r)]);
          if (r == 0) batched.push_back(logits);
          decoded[r] = 0;
        }
      }
      if (s == steps) break;
      std::vector<std::int64_t> ids;
      std::vector<std::int32_t> tokens, positions;
      for (auto& [r, done] : decoded) {
        if (done >= steps) continue;
        ids.push_back(r);
        tokens.push_back(fed[static_cast<std::size_t>(r)][static_cast<std::size_t>(done)]);
        positions.push_back(static_cast<std::int32_t>(prompts[static_cast<std::size_t>(r)].size() +
                                                      static_cast<std::size_t>(done)));
      }
      // A random order of the batch rows, too.
      const auto rotate = *rc::gen::inRange<std::size_t>(0, ids.size());
      std::rotate(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(rotate), ids.end());
      std::rotate(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(rotate), tokens.end());
      std::rotate(positions.begin(), positions.begin() + static_cast<std::ptrdiff_t>(rotate), positions.end());
      const std::vector<float> logits = e->runner->decode(ids, tokens, positions);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        ++decoded[ids[i]];
        if (ids[i] == 0) batched.emplace_back(logits.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                                              logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
      }
    }
    RC_ASSERT(batched.size() == solo.size());
    for (std::size_t i = 0; i < solo.size(); ++i) {
      RC_ASSERT(solo[i].size() == vocab);
      if (std::memcmp(solo[i].data(), batched[i].data(), vocab * sizeof(float)) != 0) {
        RC_FAIL(fmt::format("row {} of request 0 differs between solo and batched runs", i));
      }
    }
  });
}

struct PreemptionOutcome {
  std::int64_t recompute = 0, swap = 0, workloads = 0, preempted = 0;
};

void check_preemption(PreemptionMode mode, int cases, PreemptionOutcome& outcome) {
  check_property(fmt::format("engine preemption ({})", preemption_mode_name(mode)), cases, [&] {
    Workload w = *gen_workload(mode != PreemptionMode::kSwap);
    w.shape.max_positions = 64;
    const ModelConfig config = config_of(w);
    const ReferenceModel model = testing::tiny_model(config, w.model_seed);
    const std::int64_t n = *rc::gen::inRange<std::int64_t>(3, 8);
    std::vector<GenerationRequest> requests;
    for (std::int64_t r = 0; r < n; ++r) {
      GenerationRequest g;
      g.id = 10 + r;
      // Short prompts and long generations: the running requests grow into each other.
      g.prompt = testing::test_tokens(*rc::gen::inRange<std::int64_t>(1, 16), config.vocab_size,
                                      w.model_seed + 7 * static_cast<std::uint64_t>(r));
      g.max_new_tokens = *rc::gen::inRange<std::int64_t>(4, 40);
      g.stop_at_eos = *rc::gen::arbitrary<bool>();
      g.arrival_step = *rc::gen::inRange<std::int64_t>(0, 3);
      requests.push_back(g);
    }
    // Solo runs with a roomy pool.
    std::map<std::int64_t, GenerationResult> solo;
    std::int64_t alone_max = 0;
    for (const GenerationRequest& g : requests) {
      auto e = engine_for(model, w, 4096);
      Scheduler s(*e->runner, {});
      GenerationRequest alone = g;
      alone.arrival_step = 0;
      s.submit(alone);
      solo[g.id] = s.run().at(0);
      RC_ASSERT(solo[g.id].stop_reason != StopReason::kError);
      const auto ctx = static_cast<std::int64_t>(g.prompt.size() + solo[g.id].tokens.size());
      alone_max = std::max(alone_max, e->cache->request_pages(ctx));
    }
    // Together, with a pool that holds the largest request alone but not the whole workload.
    const std::int64_t pages = alone_max + *rc::gen::inRange<std::int64_t>(0, 3);
    auto e = engine_for(model, w, pages);
    SchedulerConfig sc;
    sc.preemption = mode;
    // kAuto's balance from 1 to 2^19 FLOPs per byte: both sides of the tiny models' cost ratio.
    sc.recompute_flops_per_swap_byte = std::ldexp(1.0, *rc::gen::inRange(0, 20));
    sc.max_batch = *rc::gen::inRange<std::int64_t>(2, 8);
    sc.high_watermark = *rc::gen::element(1.0, 1.0, 0.9);
    std::vector<std::string> log;
    sc.log = [&](const std::string& line) { log.push_back(line); };
    Scheduler s(*e->runner, sc);
    for (const GenerationRequest& g : requests) s.submit(g);
    const std::vector<GenerationResult> results = s.run();
    RC_ASSERT(results.size() == requests.size());
    for (std::size_t i = 0; i < results.size(); ++i) {
      const GenerationResult& r = results[i];
      RC_ASSERT(r.id == requests[i].id);
      if (r.stop_reason == StopReason::kError) RC_FAIL(fmt::format("request {} failed: {}", r.id, r.error));
      RC_ASSERT(r.tokens == solo[r.id].tokens);
      RC_ASSERT(r.stop_reason == solo[r.id].stop_reason);
    }
    RC_ASSERT(e->cache->free_pages() == e->cache->pool_pages());
    RC_ASSERT(e->cache->manager().requests().empty());
    outcome.recompute += s.stats().preemptions_recompute;
    outcome.swap += s.stats().preemptions_swap;
    ++outcome.workloads;
    if (s.stats().preemptions_recompute + s.stats().preemptions_swap > 0) ++outcome.preempted;
    RC_TAG(s.stats().preemptions_recompute + s.stats().preemptions_swap > 0 ? "preempted" : "no preemption");
  });
}

TEST(EngineProps, PreemptionPreservesEveryRequest) {
  for (const PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap, PreemptionMode::kAuto}) {
    PreemptionOutcome outcome;
    check_preemption(mode, 200, outcome);
    std::printf("preemption %s: %lld workloads, %lld with preemptions; %lld recompute and %lld swap preemptions\n",
                preemption_mode_name(mode).c_str(), static_cast<long long>(outcome.workloads),
                static_cast<long long>(outcome.preempted),
                static_cast<long long>(outcome.recompute), static_cast<long long>(outcome.swap));
    // The workloads must actually exercise the mode under test.
    EXPECT_GE(outcome.preempted, outcome.workloads / 4);
    if (mode != PreemptionMode::kSwap) {
      EXPECT_GT(outcome.recompute, 30);
    }
    if (mode != PreemptionMode::kRecompute) {
      EXPECT_GT(outcome.swap, 30);
    }
  }
}

}  // namespace
}  // namespace kvcheck
