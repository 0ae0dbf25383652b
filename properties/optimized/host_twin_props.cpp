// The host twin of the device-resident engine (docs/design.md §15; optimized/host_twin_backend.h):
//
//   TwinEngineGivesTheCpuEnginesTokensAndLogits
//       under the scheduler, with a pool small enough to preempt (by swap and by recompute), the
//       prefix cache and forked samples where the policy allows them, an engine on the twin gives
//       the CPU engine's tokens and every decode step's logits bit for bit, on every registered
//       policy (RegisteredPoliciesAreAllDrawn holds the list to the registry); so does the
//       mirrored twin, which reads its own copy of the pool kept by page stamps (a page the host
//       changed and did not restamp would be read stale);
//   ADecodeStepMovesNoKvAndOnlyItsInputsTablesAndLogits
//       the transfer ledger of every decode step: no KV byte either way (the mirrored twin: only
//       the pages it copied, at least the page each (row, layer, kv head) wrote and at most the
//       pages of the batch's tables, whole), no weight after the first step, no host-path call,
//       and exactly the step's inputs (ids, positions, row ids, logit rows), its write targets,
//       the page-table rows that changed since the backend last held them (the test's own
//       mirror), the live tokens a selecting policy reads, and the logits; the twin's page table
//       then equals the cache's for every head of the batch.
//
// Reproduce a failure with the seed it prints:
//   RC_PARAMS="seed=N" build/properties/kvcheck_property_tests --gtest_filter='HostTwinProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "optimized/engine.h"
#include "optimized/host_twin_backend.h"
#include "optimized/scheduler.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;

// Every registered policy, with parameters that make it act on tiny models (budgets under the
// context, small groups); RegisteredPoliciesAreAllDrawn checks that each registered name is here.
const std::vector<std::string>& policy_specs() {
  static const std::vector<std::string> specs = {
      "full-fp32", "full-fp16", "fp8", "int8", "int4", "kv-bits:k=4,v=2", "int4:rotate=hadamard",
      "streaming:sinks=2,window=6", "h2o:budget=8,recent=0.25", "snapkv:budget=10,window=4,pool=3",
      "pyramidkv:budget=8,ratio=4,window=2,pool=3", "adakv:budget=12,base=snapkv,floor=0.2,window=4,pool=3", "xkv:budget=8,window=2,pool=3",
      "duo:retrieval=0.5,sinks=2,recent=4", "spvllm:budget=8,recent=0.25,strategy=sparse-copy",
      "spvllm:budget=8,recent=0.25,strategy=free-block", "kivi2:group=16,residual=16", "kivi4:group=16,residual=16",
      "minikv:budget=8,residual=16,value_group=8", "leankv:alpha_h=1,alpha_l=0.3,window=4", "quest:pages=2"};
  return specs;
}

std::string spec_name(const std::string& spec) { return spec.substr(0, spec.find(':')); }

std::unique_ptr<Engine> engine_on(const std::string& device, const ReferenceModel& model, const std::string& policy,
                                  std::int64_t pages, std::int64_t page_bytes) {
  EngineOptions o;
  o.device = device;
  o.policy = policy;
  o.pages = pages;
  o.page_bytes = page_bytes;
  o.threads = 1;
  o.poison = true;  // free pages and dead slots hold NaN: a read of one shows in the logits
  return make_engine(model, o);
}

std::int64_t page_bytes_for(const std::string& spec) {
  return spec.starts_with("kivi") || spec.starts_with("minikv") ? 2048 : 512;
}

TEST(HostTwinProps, RegisteredPoliciesAreAllDrawn) {
  std::set<std::string> drawn;
  for (const std::string& s : policy_specs()) drawn.insert(spec_name(s));
  for (const std::string& name : policy_names()) {
    EXPECT_TRUE(drawn.count(name)) << name << " is registered but HostTwinProps never draws it";
  }
}

struct TwinRun {
  std::vector<GenerationResult> results;
  std::vector<std::vector<std::int64_t>> step_requests;
  std::vector<std::vector<float>> step_logits;
  SchedulerStats stats;
};

TwinRun run_on(const std::string& device, const ReferenceModel& model, const std::string& policy, std::int64_t pages,
           const SchedulerConfig& config, const std::vector<GenerationRequest>& requests) {
  auto e = engine_on(device, model, policy, pages, page_bytes_for(policy));
  if (config.prefix_cache || std::any_of(requests.begin(), requests.end(), [](const auto& r) { return r.n > 1; })) {
    e->runner->set_reusable_prefill(true);
  }
  TwinRun out;
  RunnerTrace trace;
  trace.on_logits = [&](std::span<const std::int64_t> ids, std::span<const float> logits) {
    out.step_requests.emplace_back(ids.begin(), ids.end());
    out.step_logits.emplace_back(logits.begin(), logits.end());
  };
  e->runner->set_trace(&trace);
  Scheduler s(*e->runner, config);
  for (const GenerationRequest& r : requests) s.submit(r);
  out.results = s.run();
  out.stats = s.stats();
  e->runner->set_trace(nullptr);
  return out;
}

struct TwinTotals {
  long runs = 0, steps = 0, recompute = 0, swap = 0, prefix_hits = 0, forks = 0;
};

TEST(HostTwinProps, TwinEngineGivesTheCpuEnginesTokensAndLogits) {
  TwinTotals totals;
  std::set<std::string> policies_run;
  check_property("host twin = cpu engine", 200, [&] {
    const std::string policy = *rc::gen::elementOf(policy_specs());
    testing::TinyShape shape;
    shape.max_positions = 96;
    ModelConfig c = testing::tiny_config(shape);
    if (*rc::gen::arbitrary<bool>()) c.family = ModelFamily::kQwen3;  // per-head q/k norms
    const auto model_seed = *rc::gen::inRange<std::uint64_t>(0, 100000);
    const ReferenceModel model = testing::tiny_model(c, model_seed);
    const auto probe = engine_on("cpu", model, policy, 1, page_bytes_for(policy));
    const KvPolicy& p = probe->cache->policy();
    const bool shares = p.prefix_closed();
    // A shared system prompt for some requests (prefix cache), forks where the policy shares.
    const auto system = testing::test_tokens(*rc::gen::inRange<std::int64_t>(1, 24), c.vocab_size, model_seed + 3);
    std::vector<GenerationRequest> requests;
    const auto n = *rc::gen::inRange(3, 8);
    for (int i = 0; i < n; ++i) {
      GenerationRequest r;
      r.id = 10 + i;
      if (shares && *rc::gen::arbitrary<bool>()) r.prompt = system;
      const auto tail = testing::test_tokens(*rc::gen::inRange<std::int64_t>(r.prompt.empty() ? 1 : 0, 14), c.vocab_size,
                                             model_seed + 11 * static_cast<std::uint64_t>(i));
      r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
      // Short prompts and long generations: the running requests grow into each other.
      r.max_new_tokens = *rc::gen::inRange<std::int64_t>(4, 40);
      r.stop_at_eos = false;
      r.arrival_step = *rc::gen::inRange<std::int64_t>(0, 3);
      if (shares && *rc::gen::inRange(0, 4) == 0) {
        r.n = *rc::gen::inRange<std::int64_t>(2, 4);
        r.temperature = 0.8;
        r.seed = *rc::gen::arbitrary<std::uint32_t>();
      }
      requests.push_back(std::move(r));
    }
    SchedulerConfig sc;
    sc.max_batch = *rc::gen::inRange<std::int64_t>(1, 6);
    // Swap restores a request's slots as they were: uniform policies only (scheduler.h).
    sc.preemption = p.selects_prompt() ? *rc::gen::element(PreemptionMode::kRecompute, PreemptionMode::kAuto)
                                       : *rc::gen::element(PreemptionMode::kRecompute, PreemptionMode::kSwap,
                                                           PreemptionMode::kSwap, PreemptionMode::kAuto);
    sc.recompute_flops_per_swap_byte = std::ldexp(1.0, *rc::gen::inRange(0, 20));
    sc.prefix_cache = shares && *rc::gen::arbitrary<bool>();
    std::int64_t longest = 0;
    for (const GenerationRequest& r : requests) {
      longest = std::max(longest, r.n * probe->cache->request_pages(static_cast<std::int64_t>(r.prompt.size()) +
                                                                    r.max_new_tokens));
    }
    const std::int64_t pages = longest * *rc::gen::element<std::int64_t>(4, 4, 5, 6, 100) / 4;
    const TwinRun cpu = run_on("cpu", model, policy, pages, sc, requests);
    for (const char* device : {"host-twin", "host-twin-mirrored"}) {
      const TwinRun twin = run_on(device, model, policy, pages, sc, requests);
      RC_ASSERT(twin.results.size() == cpu.results.size());
      for (std::size_t i = 0; i < cpu.results.size(); ++i) {
        const GenerationResult& a = twin.results[i];
        const GenerationResult& b = cpu.results[i];
        if (a.stop_reason == StopReason::kError || b.stop_reason == StopReason::kError) {
          RC_FAIL(fmt::format("{} on {}: request {} failed: twin '{}', cpu '{}'", policy, device, b.id, a.error, b.error));
        }
        if (a.tokens != b.tokens || a.samples != b.samples || a.stop_reason != b.stop_reason) {
          RC_FAIL(fmt::format("{} on {}: request {}: the twin's tokens differ from the cpu engine's", policy, device, b.id));
        }
      }
      RC_ASSERT(twin.step_logits.size() == cpu.step_logits.size());
      for (std::size_t s = 0; s < cpu.step_logits.size(); ++s) {
        RC_ASSERT(twin.step_requests[s] == cpu.step_requests[s]);
        const auto& a = twin.step_logits[s];
        const auto& b = cpu.step_logits[s];
        if (a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
          const std::string why = fmt::format("{} on {}: decode step {} (requests {}): the twin's logits differ from the "
                                              "cpu engine's", policy, device, s, fmt::join(cpu.step_requests[s], ","));
          RC_FAIL(why);
        }
      }
    }
    policies_run.insert(spec_name(policy));
    ++totals.runs;
    totals.steps += static_cast<long>(cpu.step_logits.size());
    totals.recompute += cpu.stats.preemptions_recompute;
    totals.swap += cpu.stats.preemptions_swap;
    totals.prefix_hits += cpu.stats.prefix_hit_tokens;
    totals.forks += std::count_if(requests.begin(), requests.end(), [](const auto& r) { return r.n > 1; });
  });
  std::printf("%ld workloads over %zu policies, %ld decode steps; %ld recompute and %ld swap preemptions, %ld prompt "
              "tokens from the prefix cache, %ld forked requests\n",
              totals.runs, policies_run.size(), totals.steps, totals.recompute, totals.swap, totals.prefix_hits,
              totals.forks);
  // The property is only as strong as what it exercised.
  EXPECT_EQ(policies_run.size(), policy_names().size());
  EXPECT_GT(totals.recompute, 0);
  EXPECT_GT(totals.swap, 0);
  EXPECT_GT(totals.prefix_hits, 0);
  EXPECT_GT(totals.forks, 0);
}

using HeadKey = std::tuple<std::int64_t, std::int32_t, std::int32_t>;

TEST(HostTwinProps, ADecodeStepMovesNoKvAndOnlyItsInputsTablesAndLogits) {
  long steps = 0, steps_with_deltas = 0, steps_without_deltas = 0, steps_with_decisions = 0;
  check_property("host twin transfer ledger", 40, [&] {
    const std::string policy = *rc::gen::elementOf(policy_specs());
    testing::TinyShape shape;
    shape.max_positions = 96;
    ModelConfig c = testing::tiny_config(shape);
    if (*rc::gen::arbitrary<bool>()) c.family = ModelFamily::kQwen3;
    const ReferenceModel model = testing::tiny_model(c, *rc::gen::inRange<std::uint64_t>(0, 100000));
    const bool mirrored = *rc::gen::arbitrary<bool>();
    auto e = engine_on(mirrored ? "host-twin-mirrored" : "host-twin", model, policy, 4000, page_bytes_for(policy));
    auto& twin = dynamic_cast<HostTwinBackend&>(*e->backend);
    const PagePool& pool = e->cache->manager().pool();
    const std::int64_t page_copy_bytes = pool.page_bytes() + static_cast<std::int64_t>(pool.live_mask(0).size_bytes()) + 4;
    const KvPolicy& p = e->cache->policy();
    const std::int64_t L = c.num_hidden_layers, H = c.num_key_value_heads, V = c.vocab_size;
    const auto n = *rc::gen::inRange(1, 5);
    std::vector<std::int64_t> ids;
    std::map<std::int64_t, std::int32_t> next_position, next_token;
    for (int i = 0; i < n; ++i) {
      const auto prompt = testing::test_tokens(*rc::gen::inRange<std::int64_t>(1, 20), V, 5 + static_cast<std::uint64_t>(i));
      const std::vector<float> logits = e->runner->prefill(i, prompt);
      ids.push_back(i);
      next_position[i] = static_cast<std::int32_t>(prompt.size());
      next_token[i] = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    std::map<HeadKey, std::vector<std::int32_t>> mirror;  // what the twin was last sent, as the test sees it
    const auto decode_steps = *rc::gen::inRange(1, 24);
    for (int step = 0; step < decode_steps; ++step) {
      std::vector<std::int64_t> batch;
      for (std::int64_t id : ids) {
        if (*rc::gen::inRange(0, 4) > 0) batch.push_back(id);
      }
      if (batch.empty()) batch.push_back(ids.front());
      const auto B = static_cast<std::int64_t>(batch.size());
      std::vector<std::int32_t> tokens, positions;
      for (std::int64_t id : batch) {
        tokens.push_back(next_token[id]);
        positions.push_back(next_position[id]);
      }
      std::vector<std::size_t> rows;
      for (std::int64_t b = 0; b < B; ++b) {
        if (*rc::gen::inRange(0, 3) > 0) rows.push_back(static_cast<std::size_t>(b));
      }
      const bool subset = *rc::gen::arbitrary<bool>();
      // What a selecting policy reads before the step: each live token's position and score.
      std::int64_t decisions = 0;
      if (p.selects_prompt()) {
        std::vector<LiveToken> live;
        std::vector<SlotRef> slots;
        for (std::int64_t id : batch) {
          for (std::int32_t l = 0; l < L; ++l) {
            for (std::int32_t h = 0; h < H; ++h) {
              e->cache->live_tokens(id, l, h, live, slots);
              decisions += static_cast<std::int64_t>(live.size()) * 8;
            }
          }
        }
      }
      const std::int64_t host_calls = twin.host_path_calls();
      const std::int64_t copied_before = twin.pages_copied();
      const std::vector<float> logits = e->runner->decode(batch, tokens, positions, subset ? &rows : nullptr);
      const TransferCounts& t = twin.ledger().step();
      const std::int64_t R = subset ? static_cast<std::int64_t>(rows.size()) : B;
      // The page-table rows that changed since the twin last held them, from the cache itself.
      std::int64_t table_bytes = 0, table_pages = 0;
      std::vector<std::int32_t> now;
      for (std::int64_t id : batch) {
        for (std::int32_t l = 0; l < L; ++l) {
          for (std::int32_t h = 0; h < H; ++h) {
            e->cache->head_page_ids(id, l, h, now);
            table_pages += static_cast<std::int64_t>(now.size()) / 2;
            auto& sent = mirror[{id, l, h}];
            if (sent != now) table_bytes += (5 + static_cast<std::int64_t>(now.size())) * 4;
            sent = now;
            const auto it = twin.table().find({id, l, h});
            if (it == twin.table().end() || it->second != now) {
              RC_FAIL(fmt::format("{}: step {}: the twin's page table of request {} layer {} head {} is not the cache's",
                                  policy, step, id, l, h));
            }
          }
        }
      }
      const std::string what = fmt::format("{}: step {} (batch {}, {} logit rows): {}", policy, step, B, R, t.summary());
      // The mirrored twin copies whole pages: those the step wrote, and those the host changed.
      const std::int64_t copied = twin.pages_copied() - copied_before;
      const std::int64_t kv = copied * page_copy_bytes;
      if (!mirrored && copied != 0) RC_FAIL("the shared twin copied pages: " + what);
      if (mirrored && (copied < B * L * H || copied > table_pages)) {
        RC_FAIL(fmt::format("{} pages copied, expected from {} (one written per row, layer and kv head) to {} (every "
                            "page of the batch's tables): {}", copied, B * L * H, table_pages, what));
      }
      if (t.of(Direction::kToDevice, Transfer::kKv) != kv || t.of(Direction::kToHost, Transfer::kKv) != 0) {
        RC_FAIL(fmt::format("a decode step moved KV bytes other than {} pages' copies: {}", copied, what));
      }
      if (twin.host_path_calls() != host_calls) RC_FAIL("a decode step used the host path: " + what);
      const std::int64_t rows_bytes = 8 * B + (subset && R != B ? 4 * R : 0);
      if (t.of(Direction::kToDevice, Transfer::kTokens) != 4 * B || t.of(Direction::kToDevice, Transfer::kPositions) != 4 * B ||
          t.of(Direction::kToDevice, Transfer::kRows) != rows_bytes ||
          t.of(Direction::kToDevice, Transfer::kWriteTargets) != 12 * B * L * H ||
          t.of(Direction::kToDevice, Transfer::kTables) != table_bytes ||
          t.of(Direction::kToHost, Transfer::kLogits) != 4 * R * V ||
          t.of(Direction::kToHost, Transfer::kDecisions) != decisions) {
        RC_FAIL(fmt::format("{}; expected tokens {} positions {} rows {} write targets {} tables {} logits {} decisions {}",
                            what, 4 * B, 4 * B, rows_bytes, 12 * B * L * H, table_bytes, 4 * R * V, decisions));
      }
      // Nothing else crosses: the kinds above are the whole step, with the weights a step meets for
      // the first time (the lm_head waits for a step that asks for logits).
      const std::int64_t first = t.of(Direction::kToDevice, Transfer::kWeights);
      if (t.step_bytes(Direction::kToDevice) != 8 * B + rows_bytes + 12 * B * L * H + table_bytes + first + kv ||
          t.step_bytes(Direction::kToHost) != 4 * R * V + decisions) {
        RC_FAIL("a decode step moved bytes of another kind: " + what);
      }
      ++steps;
      (table_bytes > 0 ? steps_with_deltas : steps_without_deltas) += 1;
      steps_with_decisions += decisions > 0;
      for (std::int64_t b = 0; b < B; ++b) {
        const std::int64_t id = batch[static_cast<std::size_t>(b)];
        ++next_position[id];
        next_token[id] = static_cast<std::int32_t>((next_token[id] * 7 + 3) % V);
      }
      if (next_position[batch.front()] >= c.max_position_embeddings - 1) break;
    }
    // Each weight, norm and table crossed once: at most the model's bytes (the embedding twice when
    // the lm_head is tied to it: two uses), and a step over every row after that moves none.
    std::int64_t model_bytes = e->weights.embedding.bytes() + e->weights.lm_head.w.bytes() +
                               static_cast<std::int64_t>((e->weights.lm_head.bias.size() + e->weights.final_norm.size() +
                                                          e->weights.rope_cos.size() + e->weights.rope_sin.size()) *
                                                         sizeof(float));
    for (const EngineLayer& layer : e->weights.layers) {
      for (const DenseWeight* w : {&layer.q, &layer.k, &layer.v, &layer.o, &layer.gate, &layer.up, &layer.down}) {
        model_bytes += w->w.bytes() + static_cast<std::int64_t>(w->bias.size() * sizeof(float));
      }
      model_bytes += static_cast<std::int64_t>((layer.input_norm.size() + layer.post_norm.size() + layer.q_norm.size() +
                                                layer.k_norm.size()) * sizeof(float));
    }
    const std::int64_t uploaded = twin.ledger().total().of(Direction::kToDevice, Transfer::kWeights);
    if (uploaded > model_bytes) RC_FAIL(fmt::format("{} bytes of weights uploaded, the model has {}", uploaded, model_bytes));
    for (int again = 0; again < 2; ++again) {
      std::vector<std::int32_t> tokens, positions;
      for (std::int64_t id : ids) {
        tokens.push_back(next_token[id]);
        positions.push_back(next_position[id]++);
      }
      e->runner->decode(ids, tokens, positions);
    }
    RC_ASSERT(twin.ledger().step().of(Direction::kToDevice, Transfer::kWeights) == 0);
  });
  std::printf("%ld decode steps: %ld with page-table deltas, %ld without, %ld with a selecting policy's reads\n", steps,
              steps_with_deltas, steps_without_deltas, steps_with_decisions);
  EXPECT_GT(steps_with_deltas, 0);
  EXPECT_GT(steps_without_deltas, 0);
  EXPECT_GT(steps_with_decisions, 0);
}

}  // namespace
}  // namespace kvcheck
