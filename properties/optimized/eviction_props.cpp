// The eviction policies (optimized/eviction_policies.h) held to a per-step oracle on small
// random models. At every decode step, for every layer and kv head:
//
//   attention  each query head's output equals exact attention (double) over exactly the
//              positions the head holds, with those positions' keys and values as the runner
//              computed them, rounded to fp16 as the policies store them (the shadow copy is
//              taken from the runner's trace before anything is stored, so a wrong slot, a stale
//              page or a dead slot read would all show);
//   the set    streaming: exactly the sinks and the recent window; h2o: the recent window and
//              min(context, budget) tokens; snapkv and pyramidkv: every generated token, the
//              observation window, and min(prompt, budget) prompt tokens (the layer's budget for
//              pyramidkv) chosen at prefill and never changed;
//   h2o        each live token's score is its score at the previous step plus the probability it
//              received then (the cache's slot-to-probability mapping), and the token that left
//              is the one H2O's rule picks from those scores: the lowest outside the recent
//              window, ties to the oldest.
//
//   RC_PARAMS="seed=N" build-cpu/properties/kvcheck_property_tests --gtest_filter='EvictionProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <functional>
#include <random>
#include <set>

#include "kernels/quant_math.h"
#include "optimized/engine.h"
#include "optimized/eviction_policies.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;

struct PolicyCase {
  std::string kind;  // streaming, h2o, snapkv
  std::int64_t a = 0, b = 0, c = 0;  // sinks/window; budget/recent tokens; budget/window/pool
  double recent = 0.0;
  std::string spec;
};

PolicyCase gen_policy() {
  PolicyCase p;
  p.kind = *rc::gen::element<std::string>("streaming", "h2o", "snapkv", "pyramidkv");
  if (p.kind == "streaming") {
    p.a = *rc::gen::inRange<std::int64_t>(0, 5);
    p.b = *rc::gen::inRange<std::int64_t>(1, 12);
    p.spec = fmt::format("streaming:sinks={},window={}", p.a, p.b);
  } else if (p.kind == "h2o") {
    p.a = *rc::gen::inRange<std::int64_t>(1, 16);
    p.recent = *rc::gen::element(0.0, 0.25, 0.5, 1.0);
    p.b = std::clamp<std::int64_t>(std::llround(static_cast<double>(p.a) * p.recent), 1, p.a);
    p.spec = fmt::format("h2o:budget={},recent={}", p.a, p.recent);
  } else {
    p.b = *rc::gen::inRange<std::int64_t>(1, 8);
    p.a = p.b + *rc::gen::inRange<std::int64_t>(1, 10);
    p.c = *rc::gen::element<std::int64_t>(1, 3, 7);
    if (p.kind == "snapkv") {
      p.spec = fmt::format("snapkv:budget={},window={},pool={}", p.a, p.b, p.c);
    } else {
      p.recent = *rc::gen::element(1.0, 2.0, 20.0);  // the ratio
      p.spec = fmt::format("pyramidkv:budget={},ratio={},window={},pool={}", p.a, p.recent, p.b, p.c);
    }
  }
  return p;
}

float fp16(float x) { return quant::f16_to_float(quant::f16_from_float(x)); }

struct HeadHistory {
  std::map<std::int32_t, float> scores;  // position -> score after the previous step's update
  std::set<std::int32_t> prompt_kept;    // snapkv: the prompt positions seen at the first step
  bool seen = false;
};

struct EvictionCase {
  testing::TinyShape shape;
  std::uint64_t seed = 0;
  std::int64_t page_bytes = 256, prompt = 1, steps = 1;
};

EvictionCase gen_case() {
  EvictionCase k;
  k.shape.layers = *rc::gen::inRange<std::int64_t>(1, 3);
  k.shape.kv_heads = *rc::gen::element<std::int64_t>(1, 2);
  k.shape.heads = k.shape.kv_heads * *rc::gen::element<std::int64_t>(1, 2);
  k.shape.head_dim = *rc::gen::element<std::int64_t>(8, 16);
  k.shape.hidden = k.shape.heads * 8;
  k.shape.max_positions = 96;
  k.seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
  k.page_bytes = *rc::gen::element<std::int64_t>(256, 512);
  k.prompt = *rc::gen::inRange<std::int64_t>(1, 40);
  k.steps = *rc::gen::inRange<std::int64_t>(1, 24);
  return k;
}

// Runs one request under `policy` (which claims to be `pc`) and returns the first violation of
// the per-step oracle, or "" when every step of every layer and head holds.
std::string check_case(const EvictionCase& ec, const PolicyCase& pc, std::unique_ptr<KvPolicy> policy) {
  const ModelConfig config = testing::tiny_config(ec.shape);
  const ReferenceModel model = testing::tiny_model(config, ec.seed);
  EngineOptions o;
  o.page_bytes = ec.page_bytes;
  o.pages = 512;
  o.threads = 1;
  o.poison = true;
  std::unique_ptr<Engine> e = make_engine(model, o, std::move(policy));
  const std::int64_t T = ec.prompt;
  const std::vector<std::int32_t> prompt = testing::test_tokens(T, config.vocab_size, ec.seed + 1);
  const std::int64_t d = config.head_dim, kvh = config.num_key_value_heads, group = config.group_size();
  const auto kv_dim = static_cast<std::size_t>(config.kv_dim());
  const std::int64_t tpp = e->cache->manager().pool().tokens_per_page(kHighTier);
  // Shadow keys and values [layer][position][kv_dim], fp16-rounded.
  std::vector<std::map<std::int32_t, std::vector<float>>> keys(static_cast<std::size_t>(config.num_hidden_layers)),
      values(keys.size());
  std::map<std::pair<std::int32_t, std::int32_t>, HeadHistory> history;  // (layer, head)
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<float>> last_probs;
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<SlotRef>> last_slots;
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<LiveToken>> last_live;
  std::int64_t checks = 0;
  std::string failure;
  RunnerTrace trace;
  trace.on_kv = [&](std::int64_t, std::int32_t layer, std::int32_t first, std::int64_t n, std::span<const float> k,
                    std::span<const float> v) {
    for (std::int64_t t = 0; t < n; ++t) {
      std::vector<float> kr(kv_dim), vr(kv_dim);
      for (std::size_t c = 0; c < kv_dim; ++c) {
        kr[c] = fp16(k[static_cast<std::size_t>(t) * kv_dim + c]);
        vr[c] = fp16(v[static_cast<std::size_t>(t) * kv_dim + c]);
      }
      keys[static_cast<std::size_t>(layer)][first + static_cast<std::int32_t>(t)] = kr;
      values[static_cast<std::size_t>(layer)][first + static_cast<std::int32_t>(t)] = vr;
    }
  };
  auto fail = [&](const std::string& what) {
    if (failure.empty()) failure = what;
  };
  trace.on_decode_head = [&](const DecodeHeadTrace& s) {
    std::vector<LiveToken> live;
    std::vector<SlotRef> slots;
    e->cache->live_tokens(s.request, s.layer, s.kv_head, live, slots);
    std::set<std::int32_t> held;
    for (const LiveToken& t : live) held.insert(t.position);
    const std::string at = fmt::format("{} layer {} head {} step position {}", pc.spec, s.layer, s.kv_head, s.position);
    const std::int32_t p = s.position;
    // The set the policy claims.
    if (pc.kind == "streaming") {
      std::set<std::int32_t> want;
      for (std::int32_t j = 0; j <= p; ++j) {
        if (j < pc.a || j > p - pc.b || p + 1 <= pc.a + pc.b) want.insert(j);
      }
      if (held != want) fail(at + ": streaming holds the wrong positions");
    } else if (pc.kind == "h2o") {
      if (static_cast<std::int64_t>(held.size()) != std::min<std::int64_t>(p + 1, pc.a)) {
        fail(at + fmt::format(": h2o holds {} tokens, budget {}", held.size(), pc.a));
      }
      for (std::int32_t j = std::max<std::int32_t>(0, p - static_cast<std::int32_t>(pc.b) + 1); j <= p; ++j) {
        if (!held.contains(j)) fail(at + fmt::format(": h2o dropped recent position {}", j));
      }
    } else {  // snapkv, pyramidkv: a prompt budget (per layer for pyramidkv), chosen once
      const std::int64_t budget =
          pc.kind == "snapkv" ? pc.a
                              : pyramid_budgets(pc.a, pc.recent, pc.b, static_cast<std::int32_t>(config.num_hidden_layers))
                                    .at(static_cast<std::size_t>(s.layer));
      HeadHistory& h = history[{s.layer, s.kv_head}];
      std::set<std::int32_t> prompt_part;
      for (std::int32_t j : held) {
        if (j < T) prompt_part.insert(j);
      }
      for (std::int32_t j = static_cast<std::int32_t>(T); j <= p; ++j) {
        if (!held.contains(j)) fail(at + fmt::format(": snapkv dropped generated position {}", j));
      }
      if (static_cast<std::int64_t>(prompt_part.size()) != std::min<std::int64_t>(T, budget)) {
        fail(at + fmt::format(": holds {} prompt tokens, budget {}", prompt_part.size(), budget));
      }
      for (std::int32_t j = std::max<std::int32_t>(0, static_cast<std::int32_t>(T - pc.b)); j < T; ++j) {
        if (!prompt_part.contains(j)) fail(at + fmt::format(": snapkv dropped window position {}", j));
      }
      if (h.seen && prompt_part != h.prompt_kept) fail(at + ": snapkv changed its prompt tokens during decode");
      h.prompt_kept = prompt_part;
      h.seen = true;
    }
    // H2O's scores and victim, from the previous step's scores and probabilities.
    const auto key = std::make_pair(s.layer, s.kv_head);
    if (pc.kind == "h2o" && last_live.contains(key)) {
      std::map<std::int32_t, float> expected;  // after the previous step's update
      for (std::size_t i = 0; i < last_live[key].size(); ++i) {
        const SlotRef& r = last_slots[key][i];
        const float add = last_probs[key].at(static_cast<std::size_t>(r.page_index * tpp + r.slot));
        expected[last_live[key][i].position] = last_live[key][i].score + add;
      }
      for (const LiveToken& t : live) {
        if (t.position == p) continue;
        if (!expected.contains(t.position) || expected[t.position] != t.score) {
          fail(at + fmt::format(": position {} has score {}, expected {}", t.position, t.score,
                                expected.contains(t.position) ? expected[t.position] : -1.0f));
        }
      }
      std::optional<std::int32_t> victim;  // H2O's rule, written out again
      if (static_cast<std::int64_t>(expected.size()) >= pc.a) {
        for (const auto& [pos, score] : expected) {
          if (pos > p - pc.b) continue;
          if (!victim || score < expected[*victim]) victim = pos;
        }
      }
      for (const auto& [pos, score] : expected) {
        const bool gone = !held.contains(pos);
        if (gone != (victim && *victim == pos)) fail(at + fmt::format(": position {} evicted {}, H2O's rule says {}",
                                                                      pos, gone, victim ? *victim : -1));
      }
    }
    last_live[key] = live;
    last_slots[key] = slots;
    last_probs[key].assign(s.slot_probs.begin(), s.slot_probs.end());
    // Exact attention over the held positions.
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (std::int64_t g = 0; g < group; ++g) {
      std::vector<double> logit;
      double mx = -INFINITY;
      for (std::int32_t j : held) {
        const std::vector<float>& k = keys[static_cast<std::size_t>(s.layer)].at(j);
        double dot = 0.0;
        for (std::int64_t c = 0; c < d; ++c) {
          dot += static_cast<double>(s.q[static_cast<std::size_t>(g * d + c)]) *
                 static_cast<double>(k[static_cast<std::size_t>(s.kv_head * d + c)]);
        }
        logit.push_back(dot * scale);
        mx = std::max(mx, logit.back());
      }
      double z = 0.0;
      for (double& l : logit) z += (l = std::exp(l - mx));
      for (std::int64_t c = 0; c < d; ++c) {
        double ref = 0.0, vmax = 0.0;
        std::size_t i = 0;
        for (std::int32_t j : held) {
          const double v = values[static_cast<std::size_t>(s.layer)].at(j)[static_cast<std::size_t>(s.kv_head * d + c)];
          ref += logit[i++] / z * v;
          vmax = std::max(vmax, std::abs(v));
        }
        const double got = s.out[static_cast<std::size_t>(g * d + c)];
        if (!(std::abs(got - ref) <= 1e-5 * (1.0 + vmax))) {
          fail(at + fmt::format(": query head {} channel {}: engine {} vs exact {} over the held positions", g, c,
                                got, ref));
        }
      }
    }
    ++checks;
  };
  e->runner->set_trace(&trace);
  EngineGenerateOptions go;
  go.max_new_tokens = ec.steps;
  go.stop_at_eos = false;
  const EngineGenerateResult r = engine_generate(*e, 0, prompt, go);
  if (!failure.empty()) return failure;
  if (checks != (static_cast<std::int64_t>(r.generated.size()) - 1) * config.num_hidden_layers * kvh) {
    return fmt::format("{} checks for {} generated tokens", checks, r.generated.size());
  }
  return "";
}

TEST(EvictionProps, EveryStepAttendsToExactlyWhatThePolicyHolds) {
  check_property("eviction policies: per-step oracle", 400, [] {
    const EvictionCase k = gen_case();
    const PolicyCase pc = gen_policy();
    const std::string failure = check_case(k, pc, make_policy(pc.spec));
    if (!failure.empty()) RC_FAIL(failure);
    RC_TAG(pc.kind);
  });
}

// A policy that claims to be `inner` but changes one decision: the planted bugs below must each
// make the per-step oracle fail, or the oracle has no teeth.
class PlantedBug : public KvPolicy {
 public:
  explicit PlantedBug(std::unique_ptr<KvPolicy> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::string description() const override { return "planted bug in " + inner_->name(); }
  std::vector<KvTier> tiers() const override { return inner_->tiers(); }
  bool evicts() const override { return inner_->evicts(); }
  std::int64_t observation_window() const override { return inner_->observation_window(); }
  std::vector<std::int32_t> select_prompt(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    return inner_->select_prompt(layer, n, s);
  }
  bool accumulates_scores() const override { return inner_->accumulates_scores(); }
  std::optional<std::size_t> select_victim(std::int32_t layer, std::span<const LiveToken> live,
                                           std::int32_t p) const override {
    return inner_->select_victim(layer, live, p);
  }

 protected:
  std::unique_ptr<KvPolicy> inner_;
};

// Whenever the real policy evicts, evict instead the live token that `prefer` ranks first.
class WrongVictim final : public PlantedBug {
 public:
  using Prefer = std::function<bool(const LiveToken& a, const LiveToken& b, std::int32_t new_position)>;
  WrongVictim(std::unique_ptr<KvPolicy> inner, Prefer prefer) : PlantedBug(std::move(inner)), prefer_(std::move(prefer)) {}
  std::optional<std::size_t> select_victim(std::int32_t l, std::span<const LiveToken> live,
                                           std::int32_t p) const override {
    const std::optional<std::size_t> v = inner_->select_victim(l, live, p);
    if (!v) return v;
    std::size_t pick = *v;
    for (std::size_t i = 0; i < live.size(); ++i) {
      if (prefer_(live[i], live[pick], p)) pick = i;
    }
    return pick;
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
  std::optional<std::size_t> select_victim(std::int32_t, std::span<const LiveToken> live, std::int32_t) const override {
    return live.size() > 4 ? std::optional<std::size_t>(0) : std::nullopt;
  }
};

// Streaming's prompt selection forgetting the sinks.
class SinklessStreaming final : public PlantedBug {
 public:
  using PlantedBug::PlantedBug;
  std::vector<std::int32_t> select_prompt(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    std::vector<std::int32_t> kept = inner_->select_prompt(layer, n, s);
    if (kept.size() > 1 && kept.front() == 0) kept.erase(kept.begin());
    return kept;
  }
};

TEST(EvictionProps, PlantedBugsAreCaught) {
  struct Planted {
    const char* what;
    PolicyCase pc;
    std::function<std::unique_ptr<KvPolicy>(std::unique_ptr<KvPolicy>)> plant;
  };
  auto policy_case = [](const char* kind, std::int64_t a, std::int64_t b, double recent, const std::string& spec) {
    PolicyCase pc;
    pc.kind = kind;
    pc.a = a;
    pc.b = b;
    pc.recent = recent;
    pc.spec = spec;
    return pc;
  };
  const std::vector<Planted> planted = {
      {"streaming evicts the newest token", policy_case("streaming", 2, 4, 0, "streaming:sinks=2,window=4"),
       [](auto p) {  // the newest token instead of the oldest non-sink
         return std::make_unique<WrongVictim>(std::move(p), [](const LiveToken& a, const LiveToken& b, std::int32_t) {
           return a.position > b.position;
         });
       }},
      {"streaming drops sink 0 at prefill", policy_case("streaming", 2, 4, 0, "streaming:sinks=2,window=4"),
       [](auto p) { return std::make_unique<SinklessStreaming>(std::move(p)); }},
      {"h2o evicts the heaviest hitter", policy_case("h2o", 6, 2, 0.25, "h2o:budget=6,recent=0.25"),
       [](auto p) {  // the highest score outside the window instead of the lowest
         return std::make_unique<WrongVictim>(std::move(p), [](const LiveToken& a, const LiveToken& b, std::int32_t q) {
           return a.position <= q - 2 && a.score > b.score;
         });
       }},
      {"h2o does not accumulate decode attention", policy_case("h2o", 6, 2, 0.25, "h2o:budget=6,recent=0.25"),
       [](auto p) { return std::make_unique<FrozenH2o>(std::move(p)); }},
      {"snapkv evicts while decoding", policy_case("snapkv", 6, 2, 0, "snapkv:budget=6,window=2,pool=3"),
       [](auto p) { return std::make_unique<DecodingSnapKv>(std::move(p)); }},
  };
  std::mt19937_64 rng(20261123);
  for (const Planted& bug : planted) {
    std::string caught;
    for (int i = 0; i < 40 && caught.empty(); ++i) {
      EvictionCase k;
      k.shape.layers = 2;
      k.shape.kv_heads = 1 + static_cast<std::int64_t>(rng() % 2);
      k.shape.heads = 2 * k.shape.kv_heads;
      k.shape.head_dim = 8;
      k.shape.hidden = k.shape.heads * 8;
      k.shape.max_positions = 96;
      k.seed = rng() % 1000000;
      k.prompt = 8 + static_cast<std::int64_t>(rng() % 24);
      k.steps = 8 + static_cast<std::int64_t>(rng() % 16);
      caught = check_case(k, bug.pc, bug.plant(make_policy(bug.pc.spec)));
    }
    EXPECT_FALSE(caught.empty()) << "planted bug not caught: " << bug.what;
    std::printf("planted bug \"%s\": caught: %s\n", bug.what, caught.c_str());
  }
}

}  // namespace
}  // namespace kvcheck
