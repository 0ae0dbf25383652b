// The optimized engine against the reference on small random models (known answers: identical
// greedy tokens and float-level logits for full-fp32), the CPU backend's thread invariance, and
// the engine's defined behaviour on bad input: a prompt longer than the context, an unknown
// policy or device, NaN activations, a pool too small for a prompt.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/dense_ops.h"
#include "oracles/metrics.h"
#include "optimized/cpu_backend.h"
#include "optimized/engine.h"
#include "optimized/pool_exhausted.h"
#include "optimized/scheduler.h"
#include "properties/support/model_fixtures.h"
#include "reference/errors.h"
#include "reference/generate.h"

namespace kvcheck {
namespace {

using testing::test_tokens;
using testing::tiny_config;
using testing::tiny_model;
using testing::tiny_model_edited;

std::unique_ptr<Engine> small_engine(const ReferenceModel& model, const std::string& policy, std::int64_t pages = 0,
                                     int threads = 2) {
  EngineOptions o;
  o.policy = policy;
  o.page_bytes = 512;
  o.pages = pages;
  o.threads = threads;
  o.poison = true;
  return make_engine(model, o);
}

// full-fp32 against the reference: the same greedy tokens over 40 steps and logits within float
// rounding (NMSE < 1e-9; a wrong norm, rotation or head gives ~1e-2), four prompts of 5 to 56 tokens.
void expect_full_fp32_reproduces_the_reference(const ReferenceModel& model) {
  const ModelConfig& c = model.config();
  auto engine = small_engine(model, "full-fp32");
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    const std::vector<std::int32_t> prompt = test_tokens(5 + 17 * static_cast<std::int64_t>(seed), c.vocab_size, seed);
    GenerateOptions go;
    go.max_new_tokens = 40;
    go.stop_at_eos = false;
    go.keep_logits = true;
    const GenerateResult ref = generate_greedy(model, prompt, go);
    EngineGenerateOptions eo;
    eo.max_new_tokens = 40;
    eo.stop_at_eos = false;
    eo.keep_logits = true;
    const EngineGenerateResult got = engine_generate(*engine, static_cast<std::int64_t>(seed), prompt, eo);
    EXPECT_EQ(got.generated, ref.generated) << "prompt seed " << seed;
    ASSERT_EQ(static_cast<Eigen::Index>(got.logits.size()), ref.logits.size());
    const double e = nmse(std::span<const float>(got.logits),
                          std::span<const float>(ref.logits.data(), static_cast<std::size_t>(ref.logits.size())));
    EXPECT_LT(e, 1e-9) << "prompt seed " << seed;
    EXPECT_EQ(engine->cache->free_pages(), engine->cache->pool_pages()) << "pages freed after the request";
  }
}

TEST(Engine, FullFp32ReproducesTheReference) {
  const ModelConfig c = tiny_config();
  expect_full_fp32_reproduces_the_reference(tiny_model(c, 7));
}

TEST(Engine, FullFp32ReproducesTheReferenceOnQwen3) {
  expect_full_fp32_reproduces_the_reference(tiny_model(testing::tiny_qwen3_config(), 9, DType::kBF16));
}

TEST(Engine, QuantizedPoliciesStayCloseAndOrdered) {
  // int8 keeps logits much closer to the reference than int4; both are far from exact.
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 11);
  const std::vector<std::int32_t> prompt = test_tokens(60, c.vocab_size, 3);
  const MatrixRM ref = model.forward(prompt);
  std::map<std::string, double> err;
  for (const char* policy : {"full-fp16", "int8", "int4"}) {
    auto engine = small_engine(model, policy);
    EngineGenerateOptions eo;
    eo.max_new_tokens = 30;
    eo.stop_at_eos = false;
    eo.keep_logits = true;
    eo.forced = std::span<const std::int32_t>(prompt).subspan(30);
    const EngineGenerateResult got = engine_generate(*engine, 0, std::span<const std::int32_t>(prompt).first(30), eo);
    // Rows 30 .. 59 read the compressed cache.
    const auto V = static_cast<std::size_t>(c.vocab_size);
    err[policy] = nmse(std::span<const float>(got.logits).subspan(30 * V, 30 * V),
                       std::span<const float>(ref.data() + 30 * V, 30 * V));
  }
  EXPECT_LT(err["full-fp16"], 1e-5);
  EXPECT_GT(err["int8"], err["full-fp16"]);
  EXPECT_LT(err["int8"], 1e-2);
  EXPECT_GT(err["int4"], 4 * err["int8"]);
}

// Rotation is exact in exact arithmetic: an fp16 cache of rotated keys and values (kv-bits at 16
// bits) gives the unrotated fp16 cache's greedy tokens and logits within fp16 rounding, prefill
// included (the per-step oracle sees decode only). A query left unrotated, or an output not
// rotated back at prefill or decode, moves the logits by ~1e-1 (NMSE).
TEST(Engine, RotatedFp16CacheMatchesTheUnrotatedOne) {
  const ReferenceModel model = tiny_model(tiny_config(), 11);
  const ModelConfig& c = model.config();
  for (const char* spec : {"kv-bits:k=16,v=16,rotate=hadamard", "kv-bits:k=16,v=16,rotate=hadamard-signs,rotate_seed=9"}) {
    auto plain = small_engine(model, "full-fp16");
    auto rotated = small_engine(model, spec);
    EXPECT_EQ(rotated->policy->name(), spec);
    const std::vector<std::int32_t> prompt = test_tokens(23, c.vocab_size, 4);
    EngineGenerateOptions eo;
    eo.max_new_tokens = 24;
    eo.stop_at_eos = false;
    eo.keep_logits = true;
    const EngineGenerateResult a = engine_generate(*plain, 0, prompt, eo);
    const EngineGenerateResult b = engine_generate(*rotated, 0, prompt, eo);
    EXPECT_EQ(a.generated, b.generated) << spec;
    EXPECT_LT(nmse(std::span<const float>(b.logits), std::span<const float>(a.logits)), 1e-6) << spec;
  }
}

TEST(Engine, RotationNeedsAPowerOfTwoHeadDim) {
  testing::TinyShape shape;
  shape.head_dim = 12;
  shape.hidden = 48;
  const ReferenceModel model = tiny_model(tiny_config(shape), 1);
  try {
    small_engine(model, "int4:rotate=hadamard");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy 'int4:rotate=hadamard'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("head_dim is 12"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(small_engine(model, "int4"));
  EXPECT_THROW(make_policy("int4:rotate=hadamard,rotate_seed=3"), InputError);  // a seed needs the signs
  EXPECT_THROW(make_policy("int4:rotate=walsh"), InputError);
}

TEST(Engine, CpuBackendIsThreadInvariant) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 5);
  const std::vector<std::int32_t> prompt = test_tokens(33, c.vocab_size, 9);
  std::vector<std::vector<float>> logits;
  for (int threads : {1, 2, 3}) {
    auto engine = small_engine(model, "int8", 0, threads);
    EngineGenerateOptions eo;
    eo.max_new_tokens = 12;
    eo.stop_at_eos = false;
    eo.keep_logits = true;
    logits.push_back(engine_generate(*engine, 0, prompt, eo).logits);
  }
  for (std::size_t i = 1; i < logits.size(); ++i) {
    ASSERT_EQ(logits[i].size(), logits[0].size());
    EXPECT_EQ(std::memcmp(logits[i].data(), logits[0].data(), logits[0].size() * sizeof(float)), 0)
        << "threads differ in the last bits";
  }
}

// SwiGLU over a decode batch's or a prompt's rows is split into tasks of 8,192 elements on the
// pool; every element, the last partial task's included, is the kernel's own, on 1 or 2 threads.
TEST(Engine, CpuBackendSwiGluSplitsWithoutChangingAnElement) {
  const std::int64_t n = 3 * 8192 + 77;  // parallel (n x 32 >= 2M work) with a partial last task
  std::vector<float> up(static_cast<std::size_t>(n)), gate0(up.size());
  for (std::int64_t i = 0; i < n; ++i) {
    gate0[static_cast<std::size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 6.0f;
    up[static_cast<std::size_t>(i)] = std::cos(0.11f * static_cast<float>(i));
  }
  std::vector<float> want = gate0;
  swiglu(want.data(), up.data(), n);
  for (int threads : {1, 2}) {
    CpuBackend backend(threads);
    std::vector<float> got = gate0;
    backend.swiglu(got, up);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << threads << " threads";
  }
}

TEST(Engine, RejectsBadInputNamingIt) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 5);
  auto engine = small_engine(model, "full-fp32");
  const std::vector<std::int32_t> too_long = test_tokens(c.max_position_embeddings + 1, c.vocab_size, 1);
  try {
    engine->runner->prefill(42, too_long);
    FAIL() << "a prompt longer than the context was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("request 42"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_position_embeddings"), std::string::npos) << e.what();
  }
  const std::vector<std::int32_t> bad_id = {1, static_cast<std::int32_t>(c.vocab_size)};
  EXPECT_THROW(engine->runner->prefill(1, bad_id), InputError);
  EXPECT_FALSE(engine->cache->has(1));
  EngineOptions o;
  o.policy = "no-such-policy";
  try {
    make_engine(model, o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("full-fp32"), std::string::npos) << "lists the known policies: " << e.what();
  }
  o.policy = "full-fp32";
  o.device = "cuda";
  EXPECT_THROW(make_engine(model, o), InputError);
}

TEST(Engine, NanActivationsAreRejectedNotStored) {
  // A model whose layer-0 key projection is NaN produces NaN keys at the first token.
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model_edited(c, 5, "model.layers.0.self_attn.k_proj.weight",
                                                 [](std::vector<float>& w) { w[0] = std::nanf(""); });
  auto engine = small_engine(model, "int8");
  const std::int64_t before = engine->cache->free_pages();
  try {
    engine->runner->prefill(3, test_tokens(10, c.vocab_size, 1));
    FAIL() << "NaN keys were stored";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("request 3"), std::string::npos) << m;
    EXPECT_NE(m.find("layer 0"), std::string::npos) << m;
    EXPECT_NE(m.find("position 0"), std::string::npos) << m;
  }
  EXPECT_FALSE(engine->cache->has(3));
  EXPECT_EQ(engine->cache->free_pages(), before) << "a failed prefill keeps no page";
}

// A key beyond fp16's range (65504) would round to infinity: under an fp16 tier, and under KIVI
// (its quantized tier is encoded from fp16), it is rejected naming where it is; fp32 stores it.
TEST(Engine, KeysBeyondFp16RangeAreRejectedWhereFp16StoresThem) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model =
      tiny_model_edited(c, 5, "model.layers.0.self_attn.k_proj.weight", [](std::vector<float>& w) {
        for (float& x : w) x *= 1e6f;
      });
  for (const char* policy : {"full-fp16", "kivi4:group=16,residual=16", "full-fp32"}) {
    EngineOptions o;
    o.policy = policy;
    o.page_bytes = 4096;
    o.poison = true;
    auto engine = make_engine(model, o);
    const std::int64_t before = engine->cache->free_pages();
    const bool fp32 = std::string(policy) == "full-fp32";
    try {
      engine->runner->prefill(4, test_tokens(20, c.vocab_size, 1));
      EXPECT_TRUE(fp32) << policy << ": a key beyond fp16's range was stored";
    } catch (const InputError& e) {
      EXPECT_FALSE(fp32) << e.what();
      const std::string m = e.what();
      EXPECT_NE(m.find("request 4"), std::string::npos) << m;
      EXPECT_NE(m.find("layer 0"), std::string::npos) << m;
      EXPECT_NE(m.find("outside fp16's range"), std::string::npos) << m;
      EXPECT_EQ(engine->cache->free_pages(), before) << "a failed prefill keeps no page";
    }
  }
}

TEST(Engine, PoolTooSmallForPromptKeepsNothing) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 5);
  auto engine = small_engine(model, "full-fp32", 6);
  const std::vector<std::int32_t> prompt = test_tokens(40, c.vocab_size, 1);
  ASSERT_GT(engine->cache->request_pages(40), 6);
  ASSERT_LE(engine->cache->request_pages(2), 6);
  EXPECT_THROW(engine->runner->prefill(0, prompt), PoolExhausted);
  EXPECT_FALSE(engine->cache->has(0));
  EXPECT_EQ(engine->cache->free_pages(), 6);
  // Through the scheduler: rejected at submission, with the reason, and nothing else lost.
  Scheduler s(*engine->runner, {});
  s.submit({7, prompt, 4, false, 0});
  s.submit({8, test_tokens(2, c.vocab_size, 2), 0, false, 0});
  const std::vector<GenerationResult> r = s.run();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].stop_reason, StopReason::kError);
  EXPECT_NE(r[0].error.find("request 7"), std::string::npos) << r[0].error;
  EXPECT_NE(r[0].error.find("pool has 6"), std::string::npos) << r[0].error;
  EXPECT_EQ(r[1].stop_reason, StopReason::kMaxNewTokens);
  EXPECT_TRUE(r[1].tokens.empty());
  EXPECT_THROW(s.submit({7, prompt, 1, false, 0}), InputError) << "duplicate id";
}

TEST(Engine, SwapOutAndInRestoresTheSameBytes) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 5);
  auto engine = small_engine(model, "int4");
  const std::vector<std::int32_t> prompt = test_tokens(23, c.vocab_size, 4);
  engine->runner->prefill(0, prompt);
  const std::int64_t id = 0;
  const std::int32_t tok = 3;
  const std::int32_t pos = 23;
  engine->runner->decode({&id, 1}, {&tok, 1}, {&pos, 1});
  const PagedKvCache::Swapped out = engine->cache->swap_out(0);
  EXPECT_EQ(out.tokens, 24);
  EXPECT_FALSE(engine->cache->has(0));
  engine->cache->swap_in(0, out);
  const PagedKvCache::Swapped again = engine->cache->swap_out(0);
  EXPECT_EQ(again.tokens, out.tokens);
  EXPECT_TRUE(again.slots == out.slots);
}

// decode with logit_rows returns those rows of the whole batch's logits, bit for bit, and still
// stores every row's key and value: the next step, every row asking, matches an engine whose
// first step returned all rows. Bad row lists are refused before anything is stored.
TEST(Engine, DecodeLogitRowsAreThoseRowsOfTheWholeBatch) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 5);
  auto all = small_engine(model, "int8");
  auto some = small_engine(model, "int8");
  const std::int64_t ids[3] = {0, 1, 2};
  std::int32_t pos[3];
  for (std::int64_t i = 0; i < 3; ++i) {
    const std::vector<std::int32_t> prompt = test_tokens(9 + 4 * i, c.vocab_size, 40 + static_cast<std::uint64_t>(i));
    all->runner->prefill(i, prompt);
    some->runner->prefill(i, prompt);
    pos[i] = static_cast<std::int32_t>(prompt.size());
  }
  const std::int32_t tok[3] = {3, 5, 7};
  const std::vector<float> whole = all->runner->decode(ids, tok, pos);
  const std::vector<std::size_t> bad[2] = {{2, 0}, {3}};
  for (const std::vector<std::size_t>& rows : bad) {
    EXPECT_THROW(some->runner->decode(ids, tok, pos, &rows), std::invalid_argument);
  }
  const std::vector<std::size_t> rows = {1, 2};
  const std::vector<float> part = some->runner->decode(ids, tok, pos, &rows);
  const auto V = static_cast<std::size_t>(c.vocab_size);
  ASSERT_EQ(part.size(), 2 * V);
  EXPECT_EQ(std::memcmp(part.data(), whole.data() + V, 2 * V * sizeof(float)), 0);
  // A step asking no logits stores its rows as well (in one engine; the other takes all rows).
  const std::int32_t second[3] = {pos[0] + 1, pos[1] + 1, pos[2] + 1};
  const std::vector<std::size_t> none;
  EXPECT_TRUE(some->runner->decode(ids, tok, second, &none).empty());
  all->runner->decode(ids, tok, second);
  const std::int32_t third[3] = {pos[0] + 2, pos[1] + 2, pos[2] + 2};
  const std::vector<float> a = all->runner->decode(ids, tok, third);
  const std::vector<float> b = some->runner->decode(ids, tok, third);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace kvcheck
