// engine_generate_batch (optimized/engine.h) against engine_generate, the definition: for every
// registered policy (at a small budget where it has one) and the rotated ones, on small random
// models, a batch of requests with random prompts, forced tokens, greedy steps, stop rules, kept
// logits and shared prefills gives each request's tokens, greedy choices, logits and stop reason
// bit for bit as engine_generate gives it alone on a fresh engine, and frees every page.
//   RC_PARAMS="seed=7" build/properties/kvcheck_property_tests --gtest_filter='EngineBatch*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "optimized/engine.h"
#include "optimized/pool_exhausted.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::test_tokens;

constexpr std::int64_t kPageBytes = 1024;  // whole KIVI groups of 16 tokens per page on the tiny heads

std::unique_ptr<Engine> engine_for(const ReferenceModel& model, const std::string& spec, std::int64_t pages = 4096) {
  EngineOptions o;
  o.policy = spec;
  o.page_bytes = kPageBytes;
  o.pages = pages;
  o.threads = 2;
  o.poison = true;  // free pages and dead slots hold NaN: a read of one shows in the logits
  return make_engine(model, o);
}

std::vector<std::string> specs_under_test() {
  std::vector<std::string> specs;
  for (const std::string& name : policy_names()) {
    std::string spec = policy_spec_at_budget(name, 8).value_or(name);
    if (name == "minikv") spec += ",value_group=8";  // groups of channels within the tiny heads' 8
    specs.push_back(spec);
  }
  for (const char* extra : {"int4:rotate=hadamard", "kivi2:group=16,residual=16,rotate=hadamard", "quest:pages=1"}) {
    specs.emplace_back(extra);
  }
  return specs;
}

std::string bytes_of(const std::vector<float>& x) {
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
}

TEST(EngineBatchProps, EachRequestOfABatchIsEngineGenerateAlone) {
  for (const std::string& spec : specs_under_test()) {
    check_property("engine_generate_batch == engine_generate/" + spec, 6, [&] {
      ModelConfig config = testing::tiny_config();
      config.max_position_embeddings = 128;
      const auto seed = *rc::gen::inRange<std::uint64_t>(0, 100000);
      const ReferenceModel model = testing::tiny_model(config, seed);
      const auto n = *rc::gen::inRange<std::size_t>(1, 5);
      std::vector<std::vector<std::int32_t>> prompts, forced;
      std::vector<EngineGenerateRequest> batch(n);
      std::vector<std::unique_ptr<PrefillCapture>> captures;
      auto capturer = engine_for(model, "full-fp32");
      for (std::size_t i = 0; i < n; ++i) {
        prompts.push_back(test_tokens(*rc::gen::inRange<std::int64_t>(1, 60), config.vocab_size, seed + 10 * i + 1));
        forced.push_back(test_tokens(*rc::gen::inRange<std::int64_t>(0, 10), config.vocab_size, seed + 10 * i + 2));
      }
      for (std::size_t i = 0; i < n; ++i) {
        EngineGenerateRequest& q = batch[i];
        q.request = static_cast<std::int64_t>(100 + 7 * i);
        q.prompt = prompts[i];
        q.options.forced = forced[i];
        q.options.max_new_tokens = *rc::gen::inRange<std::int64_t>(0, 12);
        q.options.stop_at_eos = *rc::gen::arbitrary<bool>();
        const int rows = *rc::gen::inRange(0, 3);
        q.options.keep_logits = rows == 1;
        q.options.keep_step_logits = rows == 2;
        if (*rc::gen::arbitrary<bool>() && !q.options.keep_logits) {
          PrefillCaptureOptions options;
          options.cover(*make_policy(spec));
          captures.push_back(std::make_unique<PrefillCapture>(capturer->runner->capture_prefill(q.prompt, options)));
          q.options.prefill = captures.back().get();
        }
      }
      auto batched = engine_for(model, spec);
      const std::vector<EngineGenerateResult> got = engine_generate_batch(*batched, batch);
      RC_ASSERT(got.size() == n);
      RC_ASSERT(batched->cache->free_pages() == batched->cache->pool_pages());
      for (std::size_t i = 0; i < n; ++i) {
        auto alone = engine_for(model, spec);
        const EngineGenerateResult want = engine_generate(*alone, batch[i].request, batch[i].prompt, batch[i].options);
        const std::string where = fmt::format("{}: request {} of {} ({} prompt tokens)", spec, i, n, prompts[i].size());
        if (got[i].generated != want.generated) RC_FAIL(where + ": tokens differ");
        if (got[i].greedy != want.greedy) RC_FAIL(where + ": greedy choices differ");
        if (bytes_of(got[i].logits) != bytes_of(want.logits)) RC_FAIL(where + ": logits differ");
        if (got[i].stop_reason != want.stop_reason) RC_FAIL(where + ": stop reasons differ");
      }
    });
  }
}

TEST(EngineBatch, RefusesARepeatedRequestAndFreesPagesOnPoolExhausted) {
  const ReferenceModel model = testing::tiny_model(testing::tiny_config(), 3);
  const auto prompt = test_tokens(40, model.config().vocab_size, 4);
  auto e = engine_for(model, "full-fp32");
  std::vector<EngineGenerateRequest> twice(2);
  twice[0].request = twice[1].request = 5;
  twice[0].prompt = twice[1].prompt = prompt;
  EXPECT_THROW(engine_generate_batch(*e, twice), std::invalid_argument);
  EXPECT_EQ(e->cache->free_pages(), e->cache->pool_pages());
  // A pool that holds one request but not three: PoolExhausted, and nothing left allocated.
  const std::int64_t one = e->cache->request_pages(44);
  auto small = engine_for(model, "full-fp32", one + one / 2);
  std::vector<EngineGenerateRequest> three(3);
  for (std::size_t i = 0; i < three.size(); ++i) {
    three[i].request = static_cast<std::int64_t>(i);
    three[i].prompt = prompt;
    three[i].options.max_new_tokens = 4;
  }
  EXPECT_NO_THROW(engine_generate(*small, 9, prompt, three[0].options));
  EXPECT_THROW(engine_generate_batch(*small, three), PoolExhausted);
  EXPECT_EQ(small->cache->free_pages(), small->cache->pool_pages());
}

}  // namespace
}  // namespace kvcheck
