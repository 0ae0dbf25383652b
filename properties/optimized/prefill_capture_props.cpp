// The shared prefill (ModelRunner::capture_prefill, prefill_from_capture; docs/design.md §3),
// held to the bits for every registered policy (at a small budget where it has one) and the
// rotated ones: on small random models, a request started from a capture and then fed the same
// tokens for a few decode steps gives prefill()'s logits at every step, holds the same pages byte
// for byte and the same live tokens (positions, tiers, scores) after the prefill and at the end,
// and the runner's trace sees the same on_kv and on_prompt_scores spans. The capture comes from
// another engine (another policy, one thread), with windows the policy does not read besides its
// own, so neither the capturing engine nor the extra windows can leak into the bits. The per-step
// oracle (oracles/engine_step_oracle.h), attached on the capture path, finds no violation.
//   RC_PARAMS="seed=7" build/properties/kvcheck_property_tests --gtest_filter='PrefillCapture*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "optimized/engine.h"
#include "optimized/pool_exhausted.h"
#include "oracles/engine_step_oracle.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/property_check.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::test_tokens;

constexpr std::int64_t kPageBytes = 1024;  // whole KIVI groups of 16 tokens per page on the tiny heads

std::unique_ptr<Engine> engine_for(const ReferenceModel& model, const std::string& spec, int threads,
                                   std::int64_t pages = 2048) {
  EngineOptions o;
  o.policy = spec;
  o.page_bytes = kPageBytes;
  o.pages = pages;
  o.threads = threads;
  o.poison = true;  // free pages and dead slots hold NaN: a read of one shows in the logits
  return make_engine(model, o);
}

// Every registered policy, at budget 8 where it has one, plus the rotations and other formats.
std::vector<std::string> specs_under_test() {
  std::vector<std::string> specs;
  for (const std::string& name : policy_names()) {
    std::string spec = policy_spec_at_budget(name, 8).value_or(name);
    if (name == "minikv") spec += ",value_group=8";  // groups of channels within the tiny heads' 8
    specs.push_back(spec);
  }
  for (const char* extra : {"int4:rotate=hadamard", "int8:rotate=hadamard-signs,rotate_seed=3",
                            "kivi2:group=16,residual=16,rotate=hadamard", "leankv:rotate=hadamard-signs,rotate_seed=5",
                            "fp8:scale=page", "quest:pages=1", "kivi4:group=16,residual=16"}) {
    specs.emplace_back(extra);
  }
  return specs;
}

// What one run shows: the trace's spans, the logits of each step, and the cache.
struct Observed {
  std::vector<std::string> kv;      // on_kv calls: header, then the rows' bytes
  std::vector<std::string> scores;  // on_prompt_scores calls
  std::vector<std::vector<float>> logits;
  std::vector<std::string> cache;   // after the prefill and after the last step
};

std::string bytes_of(std::span<const float> x) {
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
}

// Every head's live tokens (position, tier, score bits) and its pages' bytes and live bits.
std::string cache_state(const Engine& e) {
  const ModelConfig& c = e.weights.config;
  std::string s = fmt::format("tokens {} bytes {} free {};", e.cache->tokens(0), e.cache->bytes_held(0),
                              e.cache->free_pages());
  std::vector<LiveToken> live;
  std::vector<SlotRef> slots;
  std::vector<PageRead> pages;
  for (std::int32_t l = 0; l < c.num_hidden_layers; ++l) {
    for (std::int32_t h = 0; h < c.num_key_value_heads; ++h) {
      e.cache->live_tokens(0, l, h, live, slots);
      for (const LiveToken& t : live) {
        s += fmt::format("{}/{}/", t.position, t.tier);
        s += bytes_of({&t.score, 1});
      }
      e.cache->head_pages(0, l, h, pages);
      for (const PageRead& p : pages) {
        s += fmt::format("|page tier {}|", p.tier);
        s.append(reinterpret_cast<const char*>(p.bytes), static_cast<std::size_t>(kPageBytes));
        s.append(reinterpret_cast<const char*>(p.live.data()), p.live.size_bytes());
      }
    }
  }
  return s;
}

RunnerTrace recording_trace(Observed& o) {
  RunnerTrace t;
  t.on_kv = [&o](std::int64_t request, std::int32_t layer, std::int32_t first, std::int64_t tokens,
                 std::span<const float> keys, std::span<const float> values) {
    o.kv.push_back(fmt::format("{} {} {} {}", request, layer, first, tokens) + bytes_of(keys) + bytes_of(values));
  };
  t.on_prompt_scores = [&o](std::int64_t request, std::int64_t kv_heads, std::span<const PromptScores> heads) {
    std::string s = fmt::format("{} {} {}", request, kv_heads, heads.size());
    for (const PromptScores& p : heads) s += fmt::format("[{} {} {}]", p.num_layers, p.all.size(), p.window.size()) +
                                            bytes_of(p.all) + bytes_of(p.window);
    o.scores.push_back(s);
  };
  return t;
}

// Prefill (from `capture` when given), then the fed tokens one decode step each; `record`: with
// the recording trace (else the runner keeps the trace it has: the oracle's).
Observed run(Engine& e, std::span<const std::int32_t> prompt, std::span<const std::int32_t> fed,
             const PrefillCapture* capture, bool record = true) {
  Observed o;
  const RunnerTrace trace = recording_trace(o);
  if (record) e.runner->set_trace(&trace);
  o.logits.push_back(capture ? e.runner->prefill_from_capture(0, prompt, *capture) : e.runner->prefill(0, prompt));
  o.cache.push_back(cache_state(e));
  for (std::size_t s = 0; s < fed.size(); ++s) {
    const std::int64_t id = 0;
    const auto pos = static_cast<std::int32_t>(prompt.size() + s);
    o.logits.push_back(e.runner->decode({&id, 1}, {&fed[s], 1}, {&pos, 1}));
  }
  o.cache.push_back(cache_state(e));
  if (record) e.runner->set_trace(nullptr);
  return o;
}

// The first difference between two runs, or "".
std::string difference(const Observed& a, const Observed& b) {
  if (a.kv != b.kv) return fmt::format("on_kv spans differ ({} and {} calls)", a.kv.size(), b.kv.size());
  if (a.scores != b.scores) return fmt::format("on_prompt_scores spans differ ({} and {} calls)", a.scores.size(), b.scores.size());
  for (std::size_t s = 0; s < a.logits.size(); ++s) {
    if (bytes_of(a.logits[s]) != bytes_of(b.logits[s])) return fmt::format("logits of step {} differ", s);
  }
  if (a.cache[0] != b.cache[0]) return "the cache after the prefill differs";
  if (a.cache[1] != b.cache[1]) return "the cache after the decode steps differs";
  return "";
}

ModelConfig draw_config() {
  testing::TinyShape shape;
  shape.layers = *rc::gen::inRange<std::int64_t>(1, 4);
  shape.kv_heads = *rc::gen::element<std::int64_t>(1, 2);
  shape.heads = shape.kv_heads * *rc::gen::element<std::int64_t>(1, 2);
  shape.head_dim = *rc::gen::element<std::int64_t>(8, 16);
  shape.hidden = shape.heads * 8;
  shape.max_positions = 128;
  ModelConfig c = testing::tiny_config(shape);
  if (*rc::gen::arbitrary<bool>()) c.family = ModelFamily::kQwen3;
  return c;
}

TEST(PrefillCaptureProps, EveryPolicyStoresACaptureAsItsOwnPrefill) {
  int ran = 0;
  for (const std::string& spec : specs_under_test()) {
    try {
      engine_for(testing::tiny_model(testing::tiny_config(), 1), spec, 1);
    } catch (const InputError& e) {
      ADD_FAILURE() << spec << " does not build on the tiny model: " << e.what();
      continue;
    }
    ++ran;
    check_property("prefill capture == prefill/" + spec, 12, [&] {
      const ModelConfig config = draw_config();
      const auto seed = *rc::gen::inRange<std::uint64_t>(0, 100000);
      const ReferenceModel model = testing::tiny_model(config, seed);
      const auto T = *rc::gen::inRange<std::int64_t>(1, 70);
      const auto steps = *rc::gen::inRange<std::int64_t>(1, 8);
      const auto prompt = test_tokens(T, config.vocab_size, seed + 1);
      const auto fed = test_tokens(steps, config.vocab_size, seed + 2);
      auto own = engine_for(model, spec, 2);
      const Observed want = run(*own, prompt, fed, nullptr);
      // The capture: from a full-fp32 engine on one thread (no rotation whatever the policy's),
      // its window and others it does not read (summed from their own rows).
      PrefillCaptureOptions options;
      options.cover(*own->policy);
      options.windows.push_back(*rc::gen::inRange<std::int64_t>(1, 80));
      options.windows.push_back(3);
      auto capturer = engine_for(model, "full-fp32", 1);
      const PrefillCapture capture = capturer->runner->capture_prefill(prompt, options);
      RC_ASSERT(capture.mismatch(*own->policy).empty());
      auto shared = engine_for(model, spec, 2);
      const Observed got = run(*shared, prompt, fed, &capture);
      const std::string diff = difference(want, got);
      if (!diff.empty()) RC_FAIL(fmt::format("{}: {} tokens, {} steps: {}", spec, T, steps, diff));
      // The per-step oracle on the capture path: its shadow rows come from on_kv.
      auto checked = engine_for(model, spec, 2);
      {
        EngineStepOracle oracle(*checked);
        oracle.begin("capture");
        run(*checked, prompt, fed, &capture, /*record=*/false);
        RC_ASSERT(oracle.checks() > 0);
        if (oracle.violations() != 0) RC_FAIL(fmt::format("{}: oracle: {}", spec, oracle.reports().front()));
      }
    });
  }
  EXPECT_GE(ran, static_cast<int>(policy_names().size()));
}

// engine_generate from a capture: the same tokens and every row of logits (keep_logits).
TEST(PrefillCaptureProps, EngineGenerateFromACaptureIsEngineGenerate) {
  check_property("engine_generate from a capture", 20, [] {
    const ModelConfig config = draw_config();
    const auto seed = *rc::gen::inRange<std::uint64_t>(0, 100000);
    const ReferenceModel model = testing::tiny_model(config, seed);
    const std::string spec = *rc::gen::element<std::string>("int4", "h2o:budget=8,recent=0.5", "snapkv:budget=8,window=4,pool=3",
                                                            "kivi2:group=16,residual=16,rotate=hadamard");
    const auto prompt = test_tokens(*rc::gen::inRange<std::int64_t>(1, 60), config.vocab_size, seed + 1);
    const auto forced = test_tokens(*rc::gen::inRange<std::int64_t>(0, 6), config.vocab_size, seed + 2);
    EngineGenerateOptions g;
    g.max_new_tokens = static_cast<std::int64_t>(forced.size()) + 2;
    g.stop_at_eos = false;
    g.keep_logits = true;
    g.forced = forced;
    auto own = engine_for(model, spec, 2);
    const EngineGenerateResult want = engine_generate(*own, 0, prompt, g);
    PrefillCaptureOptions options;
    options.cover(*own->policy);
    options.all_logits = true;
    const PrefillCapture capture = own->runner->capture_prefill(prompt, options);
    g.prefill = &capture;
    const EngineGenerateResult got = engine_generate(*own, 0, prompt, g);
    RC_ASSERT(got.generated == want.generated);
    RC_ASSERT(got.greedy == want.greedy);
    RC_ASSERT(bytes_of(got.logits) == bytes_of(want.logits));
    RC_ASSERT(own->cache->free_pages() == own->cache->pool_pages());
  });
}

TEST(PrefillCapture, RefusesAnotherPromptOrMissingWindow) {
  const ReferenceModel model = testing::tiny_model(testing::tiny_config(), 3);
  const auto prompt = test_tokens(20, model.config().vocab_size, 4);
  auto capturer = engine_for(model, "full-fp32", 1);
  const PrefillCapture plain = capturer->runner->capture_prefill(prompt, {});
  EXPECT_EQ(plain.scores.size(), 0u);
  EXPECT_EQ(plain.bytes(), static_cast<std::int64_t>(2 * 20 * model.config().kv_dim() *
                                                         model.config().num_hidden_layers * sizeof(float) +
                                                     model.config().vocab_size * sizeof(float)));
  // Another prompt: invalid_argument naming the request, from the runner and from engine_generate.
  auto e = engine_for(model, "int4", 1);
  const auto other = test_tokens(20, model.config().vocab_size, 5);
  try {
    e->runner->prefill_from_capture(7, other, plain);
    ADD_FAILURE() << "another prompt was accepted";
  } catch (const std::invalid_argument& x) {
    EXPECT_NE(std::string(x.what()).find("request 7"), std::string::npos) << x.what();
  }
  EngineGenerateOptions g;
  g.prefill = &plain;
  EXPECT_THROW(engine_generate(*e, 8, other, g), std::invalid_argument);
  EXPECT_FALSE(e->cache->has(7));
  EXPECT_FALSE(e->cache->has(8));
  // A rotating policy starts from the same capture as the others (its store rotates copies); a
  // selecting one needs the scores.
  auto rotated = engine_for(model, "int4:rotate=hadamard", 1);
  EXPECT_EQ(plain.mismatch(*rotated->policy), "");
  auto snap = engine_for(model, "snapkv:budget=8,window=4,pool=3", 1);
  EXPECT_THROW(snap->runner->prefill_from_capture(0, prompt, plain), std::logic_error);
  PrefillCaptureOptions other_window;
  other_window.windows = {5};
  const PrefillCapture windowed = capturer->runner->capture_prefill(prompt, other_window);
  EXPECT_NE(windowed.mismatch(*snap->policy).find("last 4 queries"), std::string::npos) << windowed.mismatch(*snap->policy);
  EXPECT_THROW(snap->runner->prefill_from_capture(0, prompt, windowed), std::logic_error);
  // cover() widens to what a policy reads, and a rotation asks for nothing more.
  PrefillCaptureOptions o;
  o.cover(*rotated->policy);
  EXPECT_FALSE(o.scores);
  EXPECT_TRUE(o.windows.empty());
  o.cover(*snap->policy);
  EXPECT_TRUE(o.scores);
  EXPECT_EQ(o.windows, std::vector<std::int64_t>{4});
  // Every position's logits asked of a capture without them.
  std::vector<float> all;
  EXPECT_THROW(e->runner->prefill_from_capture(0, prompt, plain, &all), std::logic_error);
  EXPECT_FALSE(e->cache->has(0));
}

TEST(PrefillCapture, PoolExhaustedBeforeAnythingIsStored) {
  const ReferenceModel model = testing::tiny_model(testing::tiny_config(), 3);
  const auto prompt = test_tokens(60, model.config().vocab_size, 4);
  PrefillCaptureOptions options;
  options.scores = true;
  options.windows = {4};
  const PrefillCapture capture = engine_for(model, "full-fp32", 1)->runner->capture_prefill(prompt, options);
  for (const char* spec : {"full-fp32", "snapkv:budget=8,window=4,pool=3"}) {
    auto e = engine_for(model, spec, 1, /*pages=*/2);
    EXPECT_THROW(e->runner->prefill_from_capture(0, prompt, capture), PoolExhausted) << spec;
    EXPECT_FALSE(e->cache->has(0)) << spec;
    EXPECT_EQ(e->cache->free_pages(), e->cache->pool_pages()) << spec;
  }
}

}  // namespace
}  // namespace kvcheck
