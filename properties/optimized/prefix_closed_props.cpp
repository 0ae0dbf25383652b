// KvPolicy::prefix_closed, held to the bytes: for every registered policy that declares itself
// prefix-closed, the pages of a prompt's first n tokens stored alone are the pages of those n
// tokens inside a longer prompt (slot codes and metadata of every position, and every whole page
// byte for byte: a Quest page's key range too), in every layer and kv head, for random prompts and
// page-unaligned n. The prefix cache shares such pages between requests, so a policy that
// declared itself closed wrongly would hand a request another prompt's numbers; a planted liar
// (FP8 with the prompt's amax as its scale, declared closed) must be caught by the same check.
//   RC_PARAMS="seed=7" build/properties/kvcheck_property_tests --gtest_filter='PrefixClosed*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "optimized/engine.h"
#include "optimized/kv_policy.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/property_check.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::test_tokens;
using testing::tiny_config;
using testing::tiny_model;

// A policy that keeps FP8 with each prompt's amax as the scale (not a function of the prefix)
// and says it is prefix-closed.
class LyingFp8Policy : public KvPolicy {
 public:
  std::string name() const override { return "lying-fp8"; }
  std::string description() const override { return "FP8 at the prompt's amax, declared prefix-closed"; }
  std::vector<KvTier> tiers() const override { return {KvTier{fp8_e4m3_format(), fp8_e4m3_format()}}; }
  bool prefix_closed() const override { return true; }
};

std::unique_ptr<Engine> engine_for(const ReferenceModel& model, std::unique_ptr<KvPolicy> policy) {
  EngineOptions o;
  o.page_bytes = 512;
  o.pages = 256;
  o.threads = 1;
  o.poison = true;
  auto e = make_engine(model, o, std::move(policy));
  e->runner->set_reusable_prefill(true);  // rows that do not depend on the prompt's length
  return e;
}

// "" when request 0's first n positions in `alone` (an n-token prompt) and `longer` are stored
// alike; else the first difference.
std::string prefix_difference(const Engine& alone, const Engine& longer, std::int64_t n) {
  const ModelConfig& c = alone.weights.config;
  const PagePool& pa = alone.cache->manager().pool();
  const PagePool& pb = longer.cache->manager().pool();
  const std::int64_t tpp = pa.tokens_per_page(kHighTier);
  for (std::int32_t l = 0; l < c.num_hidden_layers; ++l) {
    for (std::int32_t h = 0; h < c.num_key_value_heads; ++h) {
      const PageTable& ta = alone.cache->manager().table(0, l, h);
      const PageTable& tb = longer.cache->manager().table(0, l, h);
      for (std::int64_t t = 0; t < n; ++t) {
        if (pa.load_codes(ta.at(kHighTier, t / tpp), t % tpp) != pb.load_codes(tb.at(kHighTier, t / tpp), t % tpp)) {
          return fmt::format("layer {} head {} position {}: slot codes differ", l, h, t);
        }
      }
      for (std::int64_t i = 0; i < n / tpp; ++i) {
        const auto a = pa.bytes(ta.at(kHighTier, i));
        const auto b = pb.bytes(tb.at(kHighTier, i));
        if (!std::equal(a.begin(), a.end(), b.begin(), b.end())) {
          return fmt::format("layer {} head {} whole page {}: bytes differ", l, h, i);
        }
      }
    }
  }
  return "";
}

// Random prompts of N tokens and a prefix of n < N: "" when the pages agree for every draw.
template <typename MakePolicy>
void check_prefix_pages(const ReferenceModel& model, const MakePolicy& make, const std::string& label) {
  check_property("prefix-closed/" + label, 20, [&] {
    const std::int64_t N = *rc::gen::inRange<std::int64_t>(2, 60);
    const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, N);
    const auto prompt = test_tokens(N, model.config().vocab_size, *rc::gen::arbitrary<std::uint32_t>());
    auto alone = engine_for(model, make());
    auto longer = engine_for(model, make());
    alone->runner->prefill(0, std::span(prompt).first(static_cast<std::size_t>(n)));
    longer->runner->prefill(0, prompt);
    const std::string diff = prefix_difference(*alone, *longer, n);
    if (!(diff.empty())) RC_FAIL(fmt::format("{}: prefix of {} of {} tokens: {}", label, n, N, diff));
  });
}

TEST(PrefixClosedProps, DeclaredClosedPoliciesStoreAPrefixAsTheyStoreItInsideALongerPrompt) {
  const ReferenceModel model = tiny_model(tiny_config(), 5);
  std::vector<std::string> specs = policy_names();
  for (const char* extra : {"int4:rotate=hadamard", "kv-bits:k=4,v=2", "quest:pages=2", "fp8:scale=page"}) {
    specs.emplace_back(extra);
  }
  int closed = 0;
  for (const std::string& spec : specs) {
    std::unique_ptr<KvPolicy> probe;
    try {
      probe = make_policy(spec);
      engine_for(model, make_policy(spec));  // binds: some policies need calibration first
    } catch (const InputError&) {
      continue;
    }
    if (!probe->prefix_closed()) continue;
    ++closed;
    check_prefix_pages(model, [&] { return make_policy(spec); }, spec);
  }
  EXPECT_GE(closed, 6) << "the registry's per-token formats are prefix-closed";
}

// The default derivation: what a reader of the formats expects, both ways.
TEST(PrefixClosed, DeclarationsOfTheRegistry) {
  for (const char* spec : {"full-fp32", "full-fp16", "int8", "int4", "int4:rotate=hadamard", "quest:pages=2"}) {
    EXPECT_TRUE(make_policy(spec)->prefix_closed()) << spec;
  }
  for (const char* spec : {"fp8", "fp8:scale=page", "kivi2", "minikv", "leankv", "h2o", "snapkv", "pyramidkv",
                           "streaming", "xkv", "spvllm"}) {
    EXPECT_FALSE(make_policy(spec)->prefix_closed()) << spec;
  }
}

TEST(PrefixClosedProps, APolicyThatLiesIsCaught) {
  const ReferenceModel model = tiny_model(tiny_config(), 5);
  // FP8's scale is the prompt's amax: a prefix whose amax is below the longer prompt's encodes
  // differently. One draw with a clear difference is enough to show the check sees it.
  const auto prompt = test_tokens(48, model.config().vocab_size, 3);
  bool caught = false;
  for (std::int64_t n = 1; n < 48 && !caught; n += 5) {
    auto alone = engine_for(model, std::make_unique<LyingFp8Policy>());
    auto longer = engine_for(model, std::make_unique<LyingFp8Policy>());
    alone->runner->prefill(0, std::span(prompt).first(static_cast<std::size_t>(n)));
    longer->runner->prefill(0, prompt);
    caught = !prefix_difference(*alone, *longer, n).empty();
  }
  EXPECT_TRUE(caught) << "the prefix-closed check did not see FP8's prompt-wide scale";
}

}  // namespace
}  // namespace kvcheck
