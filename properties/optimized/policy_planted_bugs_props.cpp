// The per-step policy property's teeth: one wrong decision planted in a policy at a time, each of
// which the per-step oracle or the policy's row (policy_step_table.h) must catch on some small
// random case, or the property could pass a broken policy.
//
//   build/properties/kvcheck_property_tests --gtest_filter='PolicyStepProps.PlantedBugsAreCaught'
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "kernels/cpu/kv_bytes.h"
#include "kernels/quant_math.h"
#include "optimized/duo_policy.h"
#include "optimized/engine.h"
#include "optimized/eviction_policies.h"
#include "optimized/leankv_policy.h"
#include "optimized/quest_policy.h"
#include "oracles/engine_step_oracle.h"
#include "properties/optimized/policy_step_table.h"
#include "properties/support/model_fixtures.h"

namespace kvcheck::testing {
namespace {

// A policy that claims to be `inner` but changes one decision: the planted bugs below must each
// make the per-step oracle fail, or the oracle has no teeth.
class PlantedBug : public KvPolicy {
 public:
  explicit PlantedBug(std::unique_ptr<KvPolicy> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::string description() const override { return "planted bug in " + inner_->name(); }
  std::vector<KvTier> tiers() const override { return inner_->tiers(); }
  bool evicts() const override { return inner_->evicts(); }
  std::int64_t residual_tokens() const override { return inner_->residual_tokens(); }
  SlotStrategy slot_strategy() const override { return inner_->slot_strategy(); }
  std::int64_t observation_window() const override { return inner_->observation_window(); }
  std::vector<std::int32_t> select_prompt(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    return inner_->select_prompt(layer, n, s);
  }
  PromptSelection select_prompt_tiers(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    return inner_->select_prompt_tiers(layer, n, s);
  }
  bool accumulates_scores() const override { return inner_->accumulates_scores(); }
  std::optional<std::size_t> select_victim(std::int32_t layer, std::span<const LiveToken> live,
                                           std::int32_t p) const override {
    return inner_->select_victim(layer, live, p);
  }
  StepDecision decide_step(std::int32_t layer, std::span<const LiveToken> live, std::int32_t p) const override {
    return inner_->decide_step(layer, live, p);
  }
  KvRotation rotation() const override { return inner_->rotation(); }
  void bind_engine(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t page_bytes) override {
    inner_->bind_engine(layers, kv_heads, head_dim, page_bytes);
  }
  std::int64_t selected_pages() const override { return inner_->selected_pages(); }
  std::vector<std::size_t> select_pages(std::span<const float> q, std::int64_t group, std::int64_t d,
                                        std::span<const float> key_min, std::span<const float> key_max,
                                        std::size_t written) const override {
    return inner_->select_pages(q, group, d, key_min, key_max, written);
  }

 protected:
  std::unique_ptr<KvPolicy> inner_;
};

// Whenever the real policy evicts, evict instead the live token that `prefer` ranks first.
class WrongVictim final : public PlantedBug {
 public:
  using Prefer = std::function<bool(const LiveToken& a, const LiveToken& b, std::int32_t new_position)>;
  WrongVictim(std::unique_ptr<KvPolicy> inner, Prefer prefer) : PlantedBug(std::move(inner)), prefer_(std::move(prefer)) {}
  StepDecision decide_step(std::int32_t l, std::span<const LiveToken> live, std::int32_t p) const override {
    StepDecision d = inner_->decide_step(l, live, p);
    if (!d.evict) return d;
    std::size_t pick = *d.evict;
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (prefer_(live[i], live[pick], p) && (!d.demote || i != *d.demote)) pick = i;
    }
    d.evict = pick;
    return d;
  }

 private:
  Prefer prefer_;
};

// H2O forgetting to accumulate decode attention (scores frozen at their prefill values).
class FrozenH2o final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  bool accumulates_scores() const override { return false; }
};

// SnapKV evicting during decode, like H2O without scores.
class DecodingSnapKv final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  StepDecision decide_step(std::int32_t, std::span<const LiveToken> live, std::int32_t) const override {
    return {live.size() > 4 ? std::optional<std::size_t>(0) : std::nullopt, std::nullopt};
  }
};

// LeanKV demoting the most significant high token outside the window instead of the least.
class ProudLeanKv final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  StepDecision decide_step(std::int32_t l, std::span<const LiveToken> live, std::int32_t p) const override {
    StepDecision d = inner_->decide_step(l, live, p);
    if (!d.demote || d.evict) return d;  // the victim path of a significant candidate
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (live[i].tier == 0 && live[i].position < live[*d.demote].position &&
          leankv_significance(live[i], p) > leankv_significance(live[*d.demote], p)) {
        d.demote = i;
      }
    }
    return d;
  }
};

// LeanKV moving a candidate to low without pruning the insignificant low victim.
class HoardingLeanKv final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  StepDecision decide_step(std::int32_t l, std::span<const LiveToken> live, std::int32_t p) const override {
    StepDecision d = inner_->decide_step(l, live, p);
    if (d.demote && d.evict) d.evict.reset();
    return d;
  }
};

// KIVI flushing its residual one group late (it then holds up to n_r + G fp16 tokens; a flush of
// a partial group the cache refuses outright).
class LateFlushKivi final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  StepDecision decide_step(std::int32_t l, std::span<const LiveToken> live, std::int32_t p) const override {
    const auto residual = std::count_if(live.begin(), live.end(), [](const LiveToken& t) { return t.tier == 0; });
    StepDecision d = inner_->decide_step(l, live, p);
    d.flush = residual >= inner_->residual_tokens() + 16;
    return d;
  }
};

// MiniKV evicting its oldest prompt token while decoding (selection is meant to persist).
class DecodingMiniKv final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  StepDecision decide_step(std::int32_t l, std::span<const LiveToken> live, std::int32_t p) const override {
    StepDecision d = inner_->decide_step(l, live, p);
    if (!d.flush && live.size() > 20 && live[0].tier == 0) d.evict = 0;
    return d;
  }
};

// Static LeanKV choosing its high victim by accumulated score instead of significance (which
// favours the newest tokens, that have had the fewest queries to gather attention from).
class RawScoreStaticLeanKv final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  StepDecision decide_step(std::int32_t l, std::span<const LiveToken> live, std::int32_t p) const override {
    StepDecision d = inner_->decide_step(l, live, p);
    const std::optional<std::size_t> victim = d.demote ? d.demote : d.evict;
    if (!victim || live[*victim].tier != 0) return d;
    std::size_t pick = *victim;
    for (std::size_t i = 0; i < live.size(); ++i) {
      // (window 2 in the planted case: the positions up to p - 2 are outside it)
      if (live[i].tier == 0 && live[i].position <= p - 2 && live[i].score < live[pick].score) pick = i;
    }
    (d.demote ? d.demote : d.evict) = pick;
    return d;
  }
};

// PyramidKV with every layer at the mean budget (SnapKV's selection): no pyramid.
class FlatPyramidKv final : public PlantedBug {
 public:
  FlatPyramidKv(std::unique_ptr<KvPolicy> inner, std::unique_ptr<KvPolicy> flat)
      : PlantedBug(std::move(inner)), flat_(std::move(flat)) {}
  std::vector<std::int32_t> select_prompt(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    return flat_->select_prompt(layer, n, s);
  }
  PromptSelection select_prompt_tiers(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    return flat_->select_prompt_tiers(layer, n, s);
  }

 private:
  std::unique_ptr<KvPolicy> flat_;
};

// SpvLLM claiming free-block but leaving emptied pages in place (no-op).
class NoFreeSpvLlm final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  SlotStrategy slot_strategy() const override { return SlotStrategy::kNoOp; }
};

// Streaming's prompt selection forgetting the sinks.
class SinklessStreaming final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  PromptSelection select_prompt_tiers(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    PromptSelection kept = inner_->select_prompt_tiers(layer, n, s);
    if (kept.high.size() > 1 && kept.high.front() == 0) kept.high.erase(kept.high.begin());
    return kept;
  }
};

// A rotated policy whose runner leaves the queries in the model's space (keys and values rotated).
class UnrotatedQueries final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  void rotate(RotatedPart part, std::span<float> rows, std::int64_t head_dim) const override {
    if (part != RotatedPart::kQuery) inner_->rotate(part, rows, head_dim);
  }
};

// A rotated policy whose Walsh–Hadamard matrix is not normalised (H·D both ways, no 1/√d).
class UnnormalisedHadamard final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  void rotate(RotatedPart part, std::span<float> rows, std::int64_t head_dim) const override {
    inner_->rotate(part, rows, head_dim);
    const auto root = static_cast<float>(std::sqrt(static_cast<double>(head_dim)));
    for (float& x : rows) x *= root;
  }
};

// A rotated policy whose attention output stays in the rotated space.
class OutputNotRotatedBack final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  void rotate(RotatedPart part, std::span<float> rows, std::int64_t head_dim) const override {
    if (part != RotatedPart::kOutput) inner_->rotate(part, rows, head_dim);
  }
};

// Ada-KV losing one token of a layer's total: the head that keeps the most candidates gives up its
// lowest-placed one, in every layer whose prompt is longer than its budget.
class ShortAdaKv final : public PlantedBug {
 public:
  ShortAdaKv(std::unique_ptr<KvPolicy> inner, std::int64_t window) : PlantedBug(std::move(inner)), window_(window) {}
  std::vector<PromptSelection> select_prompt_all(std::int64_t n, std::int64_t kv_heads,
                                                 std::span<const PromptScores> heads) const override {
    std::vector<PromptSelection> kept = inner_->select_prompt_all(n, kv_heads, heads);
    for (std::size_t first = 0; first < kept.size(); first += static_cast<std::size_t>(kv_heads)) {
      auto most = kept.begin() + static_cast<std::ptrdiff_t>(first);
      for (auto h = most; h != most + kv_heads && h != kept.end(); ++h) {
        if (h->high.size() > most->high.size()) most = h;
      }
      if (static_cast<std::int64_t>(most->high.size()) < n && static_cast<std::int64_t>(most->high.size()) > window_) {
        most->high.erase(most->high.end() - window_ - 1);  // the last candidate before the window
      }
    }
    return kept;
  }

 private:
  std::int64_t window_;
};

// Ada-KV ranking each head on its own (SnapKV's selection at the same budget), not jointly.
class HeadwiseAdaKv final : public PlantedBug {
 public:
  HeadwiseAdaKv(std::unique_ptr<KvPolicy> inner, std::unique_ptr<KvPolicy> snapkv)
      : PlantedBug(std::move(inner)), snapkv_(std::move(snapkv)) {}
  std::vector<PromptSelection> select_prompt_all(std::int64_t n, std::int64_t kv_heads,
                                                 std::span<const PromptScores> heads) const override {
    return snapkv_->select_prompt_all(n, kv_heads, heads);
  }

 private:
  std::unique_ptr<KvPolicy> snapkv_;
};

// DuoAttention with one head's class swapped: the policy of `swapped`'s retrieval heads claimed as
// the original's (its spec names the original's).
class SwappedDuo final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  std::vector<PromptSelection> select_prompt_all(std::int64_t n, std::int64_t kv_heads,
                                                 std::span<const PromptScores> heads) const override {
    return inner_->select_prompt_all(n, kv_heads, heads);
  }
  StepDecision decide_head_step(std::int32_t layer, std::int32_t kv_head, std::span<const LiveToken> live,
                                std::int32_t p) const override {
    return inner_->decide_head_step(layer, kv_head, live, p);
  }
};

// Quest ranking pages by Σ_c q_c·max_c alone (no min: wrong wherever a query channel is negative).
class MaxOnlyQuest final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  std::vector<std::size_t> select_pages(std::span<const float> q, std::int64_t group, std::int64_t d,
                                        std::span<const float> key_min, std::span<const float> key_max,
                                        std::size_t written) const override {
    const auto n = static_cast<std::size_t>(d);
    std::vector<float> bounds(key_max.size() / n, 0.0f);
    for (std::size_t p = 0; p < bounds.size(); ++p) {
      for (std::int64_t g = 0; g < group; ++g) {
        float u = 0.0f;
        for (std::size_t c = 0; c < n; ++c) u += q[static_cast<std::size_t>(g) * n + c] * key_max[p * n + c];
        bounds[p] = g == 0 ? u : std::max(bounds[p], u);
      }
    }
    (void)key_min;
    return top_bound_pages(bounds, inner_->selected_pages(), written);
  }
};

TEST(PolicyStepProps, PlantedBugsAreCaught) {
  struct Planted {
    const char* what;
    DrawnPolicy claim;
    std::function<std::unique_ptr<KvPolicy>(std::unique_ptr<KvPolicy>)> plant;
  };
  const DrawnPolicy streaming = claim(StreamingCase{.sinks = 2, .window = 4}, check_streaming);
  const DrawnPolicy h2o = claim(H2oCase{.budget = 6, .recent = 0.25}, check_h2o);
  const DrawnPolicy leankv = claim(LeanKvCase{.alpha_h = 1.0, .alpha_l = 0.6, .window = 3, .rotation = ""}, check_leankv);
  const DrawnPolicy adakv = claim(AdaKvCase{.budget = 8, .floor = 0.2, .window = 2, .pool = 3}, check_adakv);
  const DrawnPolicy duo = claim(DuoCase{.sinks = 2, .recent = 4, .heads = {1}}, check_duo);
  const DrawnPolicy static_leankv =
      claim(StaticLeanKvCase{.high = 3, .low = 2, .window = 2}, check_static_leankv);
  const std::vector<Planted> planted = {
      {"streaming evicts the newest token", streaming,
       [](auto p) {  // the newest token instead of the oldest non-sink
         return std::make_unique<WrongVictim>(std::move(p), [](const LiveToken& a, const LiveToken& b, std::int32_t) {
           return a.position > b.position;
         });
       }},
      {"streaming drops sink 0 at prefill", streaming,
       [](auto p) { return std::make_unique<SinklessStreaming>(std::move(p)); }},
      {"h2o evicts the heaviest hitter", h2o,
       [](auto p) {  // the highest score outside the window instead of the lowest
         return std::make_unique<WrongVictim>(std::move(p), [](const LiveToken& a, const LiveToken& b, std::int32_t q) {
           return a.position <= q - 2 && a.score > b.score;
         });
       }},
      {"h2o does not accumulate decode attention", h2o,
       [](auto p) { return std::make_unique<FrozenH2o>(std::move(p)); }},
      {"snapkv evicts while decoding", claim(SnapKvCase{.budget = 6, .window = 2, .pool = 3}, check_snapkv),
       [](auto p) { return std::make_unique<DecodingSnapKv>(std::move(p)); }},
      {"leankv demotes the most significant victim", leankv,
       [](auto p) { return std::make_unique<ProudLeanKv>(std::move(p)); }},
      {"leankv keeps an insignificant low victim", leankv,
       [](auto p) { return std::make_unique<HoardingLeanKv>(std::move(p)); }},
      {"pyramidkv gives every layer the mean budget",
       claim(PyramidKvCase{.budget = 10, .ratio = 4.0, .window = 2, .pool = 3}, check_pyramidkv),
       [](auto p) { return std::make_unique<FlatPyramidKv>(std::move(p), make_snapkv_policy(10, 2, 3)); }},
      {"spvllm free-block never frees an emptied page",
       claim(SpvLlmCase{.h2o = {.budget = 2, .recent = 0.5}, .strategy = SlotStrategy::kFreeBlock}, check_spvllm),
       [](auto p) { return std::make_unique<NoFreeSpvLlm>(std::move(p)); }},
      {"kivi flushes its residual one group late", claim(KiviCase{.bits = 2, .group = 16, .residual = 16, .rotation = ""}, check_kivi),
       [](auto p) { return std::make_unique<LateFlushKivi>(std::move(p)); }},
      {"minikv evicts while decoding",
       claim(MiniKvCase{.budget = 8, .recent = 0.5, .residual = 16, .value_group = 8}, check_minikv),
       [](auto p) { return std::make_unique<DecodingMiniKv>(std::move(p)); }},
      {"adakv loses one token of a layer's total", adakv,
       [](auto p) { return std::make_unique<ShortAdaKv>(std::move(p), 2); }},
      {"adakv ranks each head on its own (snapkv)", adakv,
       [](auto p) { return std::make_unique<HeadwiseAdaKv>(std::move(p), make_snapkv_policy(8, 2, 3)); }},
      {"duo swaps a retrieval head for a streaming one", duo,
       [](auto) {  // heads=1 claimed; head 1 streams instead
         DuoParams swapped;
         swapped.retrieval = 0.0;
         swapped.sinks = 2;
         swapped.recent = 4;
         return std::make_unique<SwappedDuo>(make_duo_policy(swapped));
       }},
      {"duo swaps a streaming head for a retrieval one", duo,
       [](auto) {  // heads=1 claimed; head 0 retrieves too
         DuoParams swapped;
         swapped.sinks = 2;
         swapped.recent = 4;
         swapped.heads = {0, 1};
         return std::make_unique<SwappedDuo>(make_duo_policy(swapped));
       }},
      {"static leankv keeps the low victim (the low tier outgrows its budget)", static_leankv,
       [](auto p) { return std::make_unique<HoardingLeanKv>(std::move(p)); }},
      {"static leankv ranks its high victim by score, not significance", static_leankv,
       [](auto p) { return std::make_unique<RawScoreStaticLeanKv>(std::move(p)); }},
      {"int4:rotate=hadamard-signs leaves the queries unrotated",
       claim(UniformCase{"int4:rotate=hadamard-signs,rotate_seed=3"}, check_uniform),
       [](auto p) { return std::make_unique<UnrotatedQueries>(std::move(p)); }},
      {"kivi2:rotate=hadamard does not normalise the Hadamard matrix",
       claim(KiviCase{.bits = 2, .group = 16, .residual = 16, .rotation = "rotate=hadamard"}, check_kivi),
       [](auto p) { return std::make_unique<UnnormalisedHadamard>(std::move(p)); }},
      {"leankv:rotate=hadamard leaves the output in the rotated space",
       claim(LeanKvCase{.alpha_h = 1.0, .alpha_l = 0.6, .window = 3, .rotation = "rotate=hadamard"}, check_leankv),
       [](auto p) { return std::make_unique<OutputNotRotatedBack>(std::move(p)); }},
      {"quest bounds a page by q·max alone", claim(UniformCase{"quest:pages=2"}, check_uniform),
       [](auto p) { return std::make_unique<MaxOnlyQuest>(std::move(p)); }},
  };
  std::mt19937_64 rng(20261123);
  for (const Planted& bug : planted) {
    std::string caught;
    for (int i = 0; i < 200 && caught.empty(); ++i) {
      PolicyStepCase k;
      k.shape.layers = 2;
      k.shape.kv_heads = 1 + static_cast<std::int64_t>(rng() % 2);
      k.shape.heads = 2 * k.shape.kv_heads;
      k.shape.head_dim = 8;
      k.shape.hidden = k.shape.heads * 8;
      k.shape.max_positions = 96;
      k.seed = rng() % 1000000;
      k.prompt = 8 + static_cast<std::int64_t>(rng() % 24);
      k.steps = 8 + static_cast<std::int64_t>(rng() % 16);
      caught = run_policy_steps(k, bug.claim, bug.plant(make_policy(bug.claim.spec)));
    }
    EXPECT_FALSE(caught.empty()) << "planted bug not caught: " << bug.what;
    std::printf("planted bug \"%s\": caught: %s\n", bug.what, caught.c_str());
  }
}

// A small engine (2 layers, 1 kv head of 8 channels, 256-byte pages: a few tokens each) for one
// policy; generate() decodes `steps` tokens after a 32-token prompt.
struct QuestRun {
  ModelConfig config;
  ReferenceModel model;
  std::unique_ptr<Engine> engine;
  QuestRun(std::uint64_t seed, std::unique_ptr<KvPolicy> policy)
      : config(tiny_config(TinyShape{.layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 8, .hidden = 16,
                                     .intermediate = 48, .vocab = 40, .max_positions = 96})),
        model(tiny_model(config, seed)) {
    EngineOptions o;
    o.page_bytes = 256;
    o.pages = 512;
    o.threads = 1;
    engine = make_engine(model, o, std::move(policy));
  }
  void generate(std::uint64_t seed, std::int64_t steps) {
    EngineGenerateOptions go;
    go.max_new_tokens = steps;
    go.stop_at_eos = false;
    (void)engine_generate(*engine, 0, test_tokens(32, config.vocab_size, seed + 1), go);
  }
};

// The oracle's counts are the whole story of a run with a planted bug: the summary's
// "oracle_violations" is the sum of the held, bound and page-selection violations, and it prints
// a line for at most max_reports of them, whichever kind they are (a page choice the bound
// rules out; attention off the held tokens' exact value).
TEST(PolicyStepProps, OracleCountsEveryViolationAndCapsItsLines) {
  struct Planted {
    const char* what;
    const char* counted;  // the summary field the bug shows in
    std::function<std::unique_ptr<KvPolicy>()> make;
  };
  const std::vector<Planted> planted = {
      {"quest bounding pages by q·max", "selection_violations",
       [] { return std::make_unique<MaxOnlyQuest>(make_policy("quest:pages=2")); }},
      {"int4 with unrotated queries", "held_violations",
       [] { return std::make_unique<UnrotatedQueries>(make_policy("int4:rotate=hadamard-signs,rotate_seed=3")); }},
  };
  for (const Planted& bug : planted) {
    bool seen = false;
    for (std::uint64_t seed = 1; seed <= 40 && !seen; ++seed) {
      QuestRun run(seed, bug.make());
      EngineStepOracle oracle(*run.engine, 2);
      oracle.begin(bug.what);
      run.generate(seed, 24);
      const nlohmann::json s = oracle.summary();
      if (s.at(bug.counted).get<std::int64_t>() < 3) continue;
      seen = true;
      EXPECT_EQ(s.at("oracle_violations").get<std::int64_t>(),
                s.at("held_violations").get<std::int64_t>() + s.at("bound_violations").get<std::int64_t>() +
                    s.at("selection_violations").get<std::int64_t>())
          << bug.what;
      EXPECT_EQ(s.at("oracle_violations").get<std::int64_t>(), oracle.violations()) << bug.what;
      EXPECT_EQ(oracle.reports().size(), 2U) << bug.what << ": max_reports is 2";
    }
    EXPECT_TRUE(seen) << bug.what << ": no seed gave three " << bug.counted;
  }
}

// The page choice is judged against the key ranges the pages store, as the engine read them: a
// stored range looser than the keys (here the first page's, widened to +-60000 after the first
// step) still bounds every key, so reading that page is the right choice and no violation. An
// oracle that recomputed the ranges from the keys would fault the engine for trusting its pages.
TEST(PolicyStepProps, PageChoiceIsJudgedOnTheStoredKeyRanges) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    QuestRun run(seed, make_policy("quest:pages=2"));
    Engine& e = *run.engine;
    std::set<std::pair<std::int32_t, std::int32_t>> widened;
    EngineStepOracle oracle(e, 20, [&](const EngineStepHead& h) {
      const DecodeHeadTrace& s = h.step;
      if (!widened.insert({s.layer, s.kv_head}).second) return;
      std::vector<PageRead> pages;
      e.cache->head_pages(s.request, s.layer, s.kv_head, pages);
      ASSERT_GE(pages.size(), 4U);  // more pages than Quest reads, so the choice matters
      const PageLayout& layout = e.cache->tiers()[static_cast<std::size_t>(pages[0].tier)].layout;
      auto* page = const_cast<std::byte*>(pages[0].bytes);  // the pool's own memory: test-only edit
      const auto d = static_cast<std::size_t>(run.config.head_dim);
      clear_page_key_range(layout, page);
      widen_page_key_range(layout, page, std::vector<std::uint16_t>(d, quant::f16_from_float(-60000.0f)));
      widen_page_key_range(layout, page, std::vector<std::uint16_t>(d, quant::f16_from_float(60000.0f)));
    });
    oracle.begin("quest:pages=2, first page's range widened");
    run.generate(seed, 16);
    EXPECT_EQ(widened.size(), 2U);
    EXPECT_EQ(oracle.violations(), 0) << "seed " << seed << ": "
                                      << (oracle.reports().empty() ? "" : oracle.reports().front());
  }
}

}  // namespace
}  // namespace kvcheck::testing
