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
//              window, ties to the oldest;
//   leankv     the same score bookkeeping; the recent window held at high; and exactly the moves
//              and drops of Algorithm 1, written out again here from the paper, from those
//              scores. A token moved to low is checked as stored in the high format, then the low.
//   leankv static  the recent window at high, exactly leankv_static_counts' high and low counts
//              in every head at every step (the same for every head), and exactly the moves and
//              drops of the static rule (optimized/leankv_policy.h), written out again here.
// PlantedBugsAreCaught plants one wrong decision in a policy at a time and expects a failure.
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
#include <tuple>

#include "oracles/held_rows_ref.h"
#include "oracles/step_oracle.h"
#include "optimized/engine.h"
#include "optimized/eviction_policies.h"
#include "optimized/leankv_policy.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;

struct PolicyCase {
  std::string kind;  // streaming, h2o, snapkv, pyramidkv, leankv, leankv-static, xkv
  std::int64_t a = 0, b = 0, c = 0;  // sinks/window; budget/recent tokens; budget/window/pool; -/window
  double recent = 0.0;               // h2o: recent share; pyramidkv: ratio
  double alpha_h = 0.0, alpha_l = 0.0;
  std::int64_t static_high = 0, static_low = 0;  // leankv-static
  std::string spec;
};

PolicyCase gen_policy() {
  PolicyCase p;
  p.kind = *rc::gen::element<std::string>("streaming", "h2o", "snapkv", "pyramidkv", "leankv", "leankv-static", "xkv",
                                          "fp8", "kivi", "minikv");
  if (p.kind == "fp8") {
    p.spec = "fp8";
  } else if (p.kind == "kivi") {
    p.a = 16;  // G: the smallest group; the tiny heads have 8 or 16 channels
    p.b = *rc::gen::element<std::int64_t>(16, 32);  // n_r
    p.spec = fmt::format("kivi{}:group={},residual={}", *rc::gen::element(2, 4), p.a, p.b);
  } else if (p.kind == "minikv") {
    p.a = *rc::gen::inRange<std::int64_t>(2, 24);   // budget
    p.b = *rc::gen::element<std::int64_t>(16, 32);  // n_r
    p.recent = *rc::gen::element(0.25, 0.5, 1.0);
    p.alpha_h = *rc::gen::element(1.0, 4.0);        // pyramid ratio
    p.spec = fmt::format("minikv:budget={},recent={},pyramid={},residual={},value_group=8", p.a, p.recent, p.alpha_h,
                         p.b);
  } else if (p.kind == "leankv-static") {
    p.b = *rc::gen::inRange<std::int64_t>(1, 9);
    p.static_high = *rc::gen::inRange<std::int64_t>(0, 8);
    p.static_low = *rc::gen::inRange<std::int64_t>(0, 8);
    const auto [hk, hv, lk, lv] = *rc::gen::element(std::tuple{8, 4, 4, 2}, std::tuple{16, 16, 8, 8}, std::tuple{8, 8, 2, 2});
    p.spec = fmt::format("leankv:static_high={},static_low={},window={},high_k={},high_v={},low_k={},low_v={}",
                         p.static_high, p.static_low, p.b, hk, hv, lk, lv);
  } else if (p.kind == "xkv") {
    p.b = *rc::gen::inRange<std::int64_t>(1, 6);
    p.a = p.b + *rc::gen::inRange<std::int64_t>(1, 10);
    p.c = *rc::gen::element<std::int64_t>(1, 3, 7);
    p.spec = fmt::format("xkv:budget={},window={},pool={}", p.a, p.b, p.c);
  } else if (p.kind == "leankv") {
    p.b = *rc::gen::inRange<std::int64_t>(1, 9);
    p.alpha_h = *rc::gen::element(0.5, 1.0, 2.0);
    p.alpha_l = p.alpha_h * *rc::gen::element(0.02, 0.2, 0.6);
    const auto [hk, hv, lk, lv] = *rc::gen::element(std::tuple{8, 4, 4, 2}, std::tuple{4, 8, 2, 4},
                                                     std::tuple{16, 16, 8, 8}, std::tuple{8, 8, 2, 2});
    p.spec = fmt::format("leankv:alpha_h={},alpha_l={},window={},high_k={},high_v={},low_k={},low_v={}", p.alpha_h,
                         p.alpha_l, p.b, hk, hv, lk, lv);
  } else if (p.kind == "streaming") {
    p.a = *rc::gen::inRange<std::int64_t>(0, 5);
    p.b = *rc::gen::inRange<std::int64_t>(1, 12);
    p.spec = fmt::format("streaming:sinks={},window={}", p.a, p.b);
  } else if (p.kind == "h2o") {
    p.a = *rc::gen::inRange<std::int64_t>(1, 16);
    p.recent = *rc::gen::element(0.0, 0.25, 0.5, 1.0);
    p.b = std::clamp<std::int64_t>(std::llround(static_cast<double>(p.a) * p.recent), 1, p.a);
    p.spec = fmt::format("h2o:budget={},recent={}", p.a, p.recent);
    // SpvLLM: H2O's decisions with a slot strategy (c: 1 + its index; 0: plain h2o).
    p.c = *rc::gen::inRange<std::int64_t>(0, 5);
    if (p.c > 0) {
      p.spec = fmt::format("spvllm:budget={},recent={},strategy={}", p.a, p.recent,
                           slot_strategy_name(kAllSlotStrategies[static_cast<std::size_t>(p.c - 1)]));
    }
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

// LeanKV's Algorithm 1 written out again from the paper, on (position, score, tier) triples:
// returns {demoted position, evicted position} (-1: none).
std::pair<std::int32_t, std::int32_t> leankv_rule(const std::vector<LiveToken>& live, std::int32_t p,
                                                  std::int64_t window, double alpha_h, double alpha_l) {
  const std::int32_t c = p - static_cast<std::int32_t>(window);
  const double n = p + 1.0;
  auto sig = [&](const LiveToken& t) { return static_cast<double>(t.score) / static_cast<double>(p - t.position); };
  const LiveToken* cand = nullptr;
  for (const LiveToken& t : live) {
    if (t.position == c && t.tier == 0) cand = &t;
  }
  if (c < 0 || cand == nullptr) return {-1, -1};
  // Lowest significance (then oldest) among a tier's tokens at or before c.
  auto lowest = [&](int tier) -> const LiveToken* {
    std::vector<const LiveToken*> pool;
    for (const LiveToken& t : live) {
      if (t.tier == tier && t.position <= c) pool.push_back(&t);
    }
    if (pool.empty()) return nullptr;
    return *std::min_element(pool.begin(), pool.end(), [&](const LiveToken* a, const LiveToken* b) {
      return std::make_pair(sig(*a), a->position) < std::make_pair(sig(*b), b->position);
    });
  };
  if (sig(*cand) >= alpha_h / n) {
    const LiveToken* v = lowest(0);
    if (sig(*v) >= alpha_h / n) return {-1, -1};
    return sig(*v) >= alpha_l / n ? std::pair{v->position, -1} : std::pair{-1, v->position};
  }
  if (sig(*cand) >= alpha_l / n) {
    const LiveToken* v = lowest(1);
    return {c, v != nullptr && sig(*v) < alpha_l / n ? v->position : -1};
  }
  return {-1, c};
}

// The static rule written out again: {demoted position, evicted position} (-1: none).
std::pair<std::int32_t, std::int32_t> leankv_static_rule(const std::vector<LiveToken>& live, std::int32_t p,
                                                         std::int64_t window, std::int64_t n_high, std::int64_t n_low) {
  const std::int32_t c = p - static_cast<std::int32_t>(window);
  if (c < 0) return {-1, -1};
  auto key = [&](const LiveToken& t) {
    return std::make_pair(static_cast<double>(t.score) / static_cast<double>(p - t.position), t.position);
  };
  std::vector<const LiveToken*> high, low;
  for (const LiveToken& t : live) {
    if (t.position <= c) (t.tier == 0 ? high : low).push_back(&t);
  }
  if (static_cast<std::int64_t>(high.size()) <= n_high) return {-1, -1};
  auto least = [&](const std::vector<const LiveToken*>& pool) {
    return *std::min_element(pool.begin(), pool.end(), [&](auto* a, auto* b) { return key(*a) < key(*b); });
  };
  const LiveToken* v = least(high);
  if (static_cast<std::int64_t>(low.size()) < n_low) return {v->position, -1};
  if (low.empty()) return {-1, v->position};
  const LiveToken* w = least(low);
  return key(*v) < key(*w) ? std::pair{-1, v->position} : std::pair{v->position, w->position};
}

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
  // A per-channel key group of 16 tokens needs a page of more than a few hundred bytes.
  o.page_bytes = pc.kind == "kivi" || pc.kind == "minikv" ? 8 * ec.page_bytes : ec.page_bytes;
  o.pages = 512;
  o.threads = 1;
  o.poison = true;
  std::unique_ptr<Engine> e = make_engine(model, o, std::move(policy));
  const std::int64_t T = ec.prompt;
  const std::vector<std::int32_t> prompt = testing::test_tokens(T, config.vocab_size, ec.seed + 1);
  const std::int64_t d = config.head_dim, kvh = config.num_key_value_heads, group = config.group_size();
  const auto kv_dim = static_cast<std::size_t>(config.kv_dim());
  const std::int64_t tpp = e->cache->manager().pool().tokens_per_page(kHighTier);
  const std::int64_t tpp_low = e->cache->manager().pool().tokens_per_page(kLowTier);
  // Shadow keys and values [layer][position][kv_dim], exact (as the runner computed them).
  std::vector<std::map<std::int32_t, std::vector<float>>> keys(static_cast<std::size_t>(config.num_hidden_layers)),
      values(keys.size());
  std::map<std::pair<std::int32_t, std::int32_t>, HeadHistory> history;  // (layer, head)
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<float>> last_probs;
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<SlotRef>> last_slots;
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<LiveToken>> last_live;
  std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t> last_high_pages;
  std::set<std::tuple<std::int32_t, std::int32_t, std::int32_t>> demoted;  // (layer, head, position)
  std::map<std::pair<std::int32_t, std::int32_t>, std::set<std::int32_t>> xkv_prompt;  // (layer, head)
  std::map<std::pair<std::int32_t, std::int32_t>, std::set<std::int32_t>> low_tier;    // residual policies
  std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t> spv_pages;             // spvllm: high pages
  std::int64_t checks = 0;
  std::string failure;
  RunnerTrace trace;
  trace.on_kv = [&](std::int64_t, std::int32_t layer, std::int32_t first, std::int64_t n, std::span<const float> k,
                    std::span<const float> v) {
    for (std::int64_t t = 0; t < n; ++t) {
      std::vector<float> kr(kv_dim), vr(kv_dim);
      for (std::size_t c = 0; c < kv_dim; ++c) {
        kr[c] = k[static_cast<std::size_t>(t) * kv_dim + c];
        vr[c] = v[static_cast<std::size_t>(t) * kv_dim + c];
      }
      keys[static_cast<std::size_t>(layer)][first + static_cast<std::int32_t>(t)] = kr;
      values[static_cast<std::size_t>(layer)][first + static_cast<std::int32_t>(t)] = vr;
    }
  };
  trace.on_demote = [&](std::int64_t, std::int32_t layer, std::int32_t head, std::int32_t position) {
    demoted.insert({layer, head, position});
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
    } else if (pc.kind == "leankv" || pc.kind == "leankv-static") {
      if (pc.kind == "leankv-static") {
        LeanKvParams lp;
        lp.window = pc.b;
        lp.static_high = pc.static_high;
        lp.static_low = pc.static_low;
        const auto [want_high, want_low] = leankv_static_counts(lp, p);
        std::int64_t high = 0, low = 0;
        for (const LiveToken& t : live) ++(t.tier == 0 ? high : low);
        if (high != want_high || low != want_low) {
          fail(at + fmt::format(": static leankv holds {} high and {} low tokens, every head must hold {} and {}", high,
                                low, want_high, want_low));
        }
      }
      for (const LiveToken& t : live) {
        if (t.position > p - pc.b && t.tier != 0) fail(at + fmt::format(": recent position {} is not at high", t.position));
      }
      for (std::int32_t j = std::max<std::int32_t>(0, p - static_cast<std::int32_t>(pc.b) + 1); j <= p; ++j) {
        if (!held.contains(j)) fail(at + fmt::format(": leankv dropped recent position {}", j));
      }
    } else if (pc.kind == "h2o") {
      if (static_cast<std::int64_t>(held.size()) != std::min<std::int64_t>(p + 1, pc.a)) {
        fail(at + fmt::format(": h2o holds {} tokens, budget {}", held.size(), pc.a));
      }
      for (std::int32_t j = std::max<std::int32_t>(0, p - static_cast<std::int32_t>(pc.b) + 1); j <= p; ++j) {
        if (!held.contains(j)) fail(at + fmt::format(": h2o dropped recent position {}", j));
      }
      // SpvLLM's slot strategies: what the pages look like after the step.
      const PageTable& table = e->cache->manager().table(s.request, s.layer, s.kv_head);
      const PagePool& pool = e->cache->manager().pool();
      const std::int64_t pages = table.count(kHighTier);
      std::int64_t& before = spv_pages[{s.layer, s.kv_head}];
      const SlotStrategy strategy = pc.c > 0 ? kAllSlotStrategies[static_cast<std::size_t>(pc.c - 1)] : SlotStrategy::kSlotReuse;
      if (strategy == SlotStrategy::kNoOp && pages < before) fail(at + ": no-op freed a page");
      if (strategy == SlotStrategy::kFreeBlock) {
        for (std::int64_t i = 0; i + 1 < pages; ++i) {
          if (pool.live_count(table.at(kHighTier, i)) == 0) fail(at + fmt::format(": free-block kept empty page {}", i));
        }
      }
      // Packed after each eviction; the append after it may open one more page.
      if (strategy == SlotStrategy::kSparseCopy && pages > (static_cast<std::int64_t>(held.size()) + tpp - 1) / tpp + 1) {
        fail(at + fmt::format(": sparse-copy holds {} pages for {} tokens", pages, held.size()));
      }
      if (strategy == SlotStrategy::kSlotReuse && pages > (pc.a + tpp - 1) / tpp + 1) {
        fail(at + fmt::format(": slot-reuse holds {} pages for a budget of {}", pages, pc.a));
      }
      before = pages;
    } else if (pc.kind == "fp8") {
      for (const LiveToken& t : live) {
        if (t.tier != 0) fail(at + ": fp8 holds a token in a second tier");
      }
      if (static_cast<std::int32_t>(held.size()) != p + 1) fail(at + ": fp8 dropped a token");
    } else if (pc.kind == "kivi" || pc.kind == "minikv") {
      // The residual (tier 0) holds 1..n_r tokens; tier 1 whole groups of G, append-only.
      const std::int64_t G = pc.kind == "kivi" ? pc.a : 16;
      std::set<std::int32_t> low;
      for (const LiveToken& t : live) {
        if (t.tier == 1) low.insert(t.position);
      }
      const auto residual = static_cast<std::int64_t>(live.size() - low.size());
      if (residual < 1 || residual > pc.b) fail(at + fmt::format(": residual of {} tokens, n_r {}", residual, pc.b));
      if (static_cast<std::int64_t>(low.size()) % G != 0) fail(at + fmt::format(": {} quantized tokens", low.size()));
      auto& before = low_tier[{s.layer, s.kv_head}];
      if (!std::includes(low.begin(), low.end(), before.begin(), before.end())) {
        fail(at + ": a quantized token left the quantized tier");
      }
      before = low;
      for (std::int32_t j = static_cast<std::int32_t>(T); j <= p; ++j) {
        if (!held.contains(j)) fail(at + fmt::format(": {} dropped generated position {}", pc.kind, j));
      }
      std::set<std::int32_t> prompt_part;
      for (std::int32_t j : held) {
        if (j < T) prompt_part.insert(j);
      }
      if (pc.kind == "kivi") {
        if (static_cast<std::int64_t>(held.size()) != p + 1) fail(at + ": kivi dropped a token");
        // The oldest tokens are the quantized ones.
        for (std::int32_t j : low) {
          if (j >= static_cast<std::int32_t>(low.size())) fail(at + fmt::format(": quantized position {} is not among the oldest", j));
        }
      } else {
        const std::int64_t recent = std::clamp<std::int64_t>(std::llround(static_cast<double>(pc.a) * pc.recent), 1, pc.a);
        const std::int64_t budget =
            pc.alpha_h > 1.0 ? pyramid_budgets(pc.a, pc.alpha_h, recent, static_cast<std::int32_t>(config.num_hidden_layers), T)
                                   .at(static_cast<std::size_t>(s.layer))
                             : pc.a;
        if (static_cast<std::int64_t>(prompt_part.size()) != std::min<std::int64_t>(T, budget)) {
          fail(at + fmt::format(": minikv holds {} prompt tokens, budget {}", prompt_part.size(), budget));
        }
        const std::int64_t window = T <= budget ? T : std::clamp<std::int64_t>(std::llround(static_cast<double>(budget) * pc.recent), 1, budget);
        for (std::int32_t j = static_cast<std::int32_t>(T - window); j < T; ++j) {
          if (!prompt_part.contains(j)) fail(at + fmt::format(": minikv dropped recent prompt position {}", j));
        }
        HeadHistory& h = history[{s.layer, s.kv_head}];
        if (h.seen && prompt_part != h.prompt_kept) fail(at + ": minikv changed its prompt tokens during decode");
        h.prompt_kept = prompt_part;
        h.seen = true;
      }
    } else if (pc.kind == "xkv") {  // per-layer budgets: checked over the layers at the end
      std::set<std::int32_t> prompt_part;
      for (std::int32_t j : held) {
        if (j < T) prompt_part.insert(j);
      }
      for (std::int32_t j = static_cast<std::int32_t>(T); j <= p; ++j) {
        if (!held.contains(j)) fail(at + fmt::format(": xkv dropped generated position {}", j));
      }
      for (std::int32_t j = std::max<std::int32_t>(0, static_cast<std::int32_t>(T - pc.b)); j < T; ++j) {
        if (!prompt_part.contains(j)) fail(at + fmt::format(": xkv dropped window position {}", j));
      }
      auto& seen = xkv_prompt[{s.layer, s.kv_head}];
      if (!seen.empty() && seen != prompt_part) fail(at + ": xkv changed its prompt tokens during decode");
      seen = prompt_part;
    } else {  // snapkv, pyramidkv: a prompt budget (per layer for pyramidkv), chosen once
      const std::int64_t budget =
          pc.kind == "snapkv" ? pc.a
                              : pyramid_budgets(pc.a, pc.recent, pc.b, static_cast<std::int32_t>(config.num_hidden_layers), T)
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
    // Accumulated scores (H2O, LeanKV) and the decisions they drive, from the previous step.
    const auto key = std::make_pair(s.layer, s.kv_head);
    const bool accumulates = pc.kind == "h2o" || pc.kind == "leankv" || pc.kind == "leankv-static";
    if (accumulates && last_live.contains(key)) {
      std::map<std::int32_t, float> expected;  // after the previous step's update
      std::vector<LiveToken> before = last_live[key];
      for (std::size_t i = 0; i < before.size(); ++i) {
        const SlotRef& r = last_slots[key][i];
        // Walk order: the high pages, then the low ones.
        const std::int64_t walk = r.tier == kHighTier ? r.page_index * tpp
                                                      : last_high_pages[key] * tpp + r.page_index * tpp_low;
        const float add = last_probs[key].at(static_cast<std::size_t>(walk + r.slot));
        expected[before[i].position] = before[i].score + add;
        before[i].score = expected[before[i].position];
      }
      for (const LiveToken& t : live) {
        if (t.position == p) continue;
        if (!expected.contains(t.position) || expected[t.position] != t.score) {
          fail(at + fmt::format(": position {} has score {}, expected {}", t.position, t.score,
                                expected.contains(t.position) ? expected[t.position] : -1.0f));
        }
      }
      if (pc.kind == "leankv" || pc.kind == "leankv-static") {
        const auto [want_demoted, want_evicted] =
            pc.kind == "leankv" ? leankv_rule(before, p, pc.b, pc.alpha_h, pc.alpha_l)
                                : leankv_static_rule(before, p, pc.b, pc.static_high, pc.static_low);
        std::map<std::int32_t, int> tier_now;
        for (const LiveToken& t : live) tier_now[t.position] = t.tier;
        for (const LiveToken& t : before) {
          const bool gone = !tier_now.contains(t.position);
          const bool moved = !gone && t.tier == 0 && tier_now[t.position] == 1;
          if (gone != (t.position == want_evicted) || moved != (t.position == want_demoted)) {
            fail(at + fmt::format(": position {} (tier {}) dropped {} moved {}; Algorithm 1 drops {} and moves {}",
                                  t.position, t.tier, gone, moved, want_evicted, want_demoted));
          }
          if (!gone && !moved && tier_now[t.position] != t.tier) fail(at + fmt::format(": position {} changed tier", t.position));
        }
      }
      std::optional<std::int32_t> victim;  // H2O's rule, written out again
      if (pc.kind == "h2o" && static_cast<std::int64_t>(expected.size()) >= pc.a) {
        for (const auto& [pos, score] : expected) {
          if (pos > p - pc.b) continue;
          if (!victim || score < expected[*victim]) victim = pos;
        }
      }
      for (const auto& [pos, score] : expected) {
        const bool gone = !held.contains(pos);
        if (pc.kind == "h2o" && gone != (victim && *victim == pos)) {
          fail(at + fmt::format(": position {} evicted {}, H2O's rule says {}", pos, gone, victim ? *victim : -1));
        }
      }
    }
    last_live[key] = live;
    last_slots[key] = slots;
    last_high_pages[key] = e->cache->manager().table(s.request, s.layer, s.kv_head).count(kHighTier);
    last_probs[key].assign(s.slot_probs.begin(), s.slot_probs.end());
    // The per-step oracle: exact attention over the held positions as their tiers store them
    // (a demoted token through the high format, then the low one), and the bound around exact
    // attention over the whole context.
    std::vector<float> ctx_k, ctx_v, held_k, held_v;
    for (std::int32_t j = 0; j <= p; ++j) {
      const auto& kr = keys[static_cast<std::size_t>(s.layer)].at(j);
      const auto& vr = values[static_cast<std::size_t>(s.layer)].at(j);
      ctx_k.insert(ctx_k.end(), kr.begin() + s.kv_head * d, kr.begin() + (s.kv_head + 1) * d);
      ctx_v.insert(ctx_v.end(), vr.begin() + s.kv_head * d, vr.begin() + (s.kv_head + 1) * d);
    }
    std::map<std::int32_t, int> tier_of;
    for (std::size_t i = 0; i < live.size(); ++i) tier_of[live[i].position] = slots[i].tier;
    std::vector<std::int32_t> held_list(held.begin(), held.end());
    std::vector<HeldToken> held_tokens;
    for (std::int32_t j : held_list) {
      held_tokens.push_back(HeldToken{j, tier_of[j], tier_of[j] == kLowTier && demoted.contains({s.layer, s.kv_head, j})});
    }
    std::vector<KvTier> tier_list;
    for (const TierRead& t : e->cache->tiers()) tier_list.push_back(t.tier);
    held_rows_ref(HeldRowsSpec{tier_list, e->cache->policy().residual_tokens() > 0, T, d}, ctx_k, ctx_v, held_tokens,
                  held_k, held_v);
    DecodeStepInputs in;
    in.group = group;
    in.head_dim = d;
    in.scale = 1.0 / std::sqrt(static_cast<double>(d));
    in.q = s.q;
    in.engine_out = s.out;
    in.keys = ctx_k;
    in.values = ctx_v;
    in.held = held_list;
    in.held_keys = held_k;
    in.held_values = held_v;
    const DecodeStepCheck r = check_decode_step(in);
    if (!r.ok()) fail(at + ": " + r.describe());
    ++checks;
  };
  e->runner->set_trace(&trace);
  EngineGenerateOptions go;
  go.max_new_tokens = ec.steps;
  go.stop_at_eos = false;
  const EngineGenerateResult r = engine_generate(*e, 0, prompt, go);
  if (!failure.empty()) return failure;
  if (pc.kind == "xkv" && !xkv_prompt.empty()) {
    // The heads of a layer keep as many prompt tokens; the layers' budgets sum to the total.
    const std::int64_t L = config.num_hidden_layers, w = pc.b;
    std::int64_t sum = 0;
    for (std::int32_t l = 0; l < L; ++l) {
      const std::size_t count = xkv_prompt[{l, 0}].size();
      for (std::int32_t h = 1; h < kvh; ++h) {
        if (xkv_prompt[{l, h}].size() != count) return fmt::format("{}: layer {} heads keep different counts", pc.spec, l);
      }
      sum += static_cast<std::int64_t>(count);
    }
    const std::int64_t candidates = std::max<std::int64_t>(0, T - w);
    const std::int64_t want = L * std::min(T, w) + std::min(L * std::max<std::int64_t>(0, pc.a - w), L * candidates);
    if (sum != want) return fmt::format("{}: the layers keep {} prompt tokens per head in all, the total is {}", pc.spec, sum, want);
  }
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
  auto leankv_case = [] {
    PolicyCase pc;
    pc.kind = "leankv";
    pc.b = 3;
    pc.alpha_h = 1.0;
    pc.alpha_l = 0.6;
    pc.spec = "leankv:alpha_h=1,alpha_l=0.6,window=3";
    return pc;
  };
  auto static_case = [](std::int64_t n_high, std::int64_t n_low) {
    PolicyCase pc;
    pc.kind = "leankv-static";
    pc.b = 2;
    pc.static_high = n_high;
    pc.static_low = n_low;
    pc.spec = fmt::format("leankv:static_high={},static_low={},window=2", n_high, n_low);
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
      {"leankv demotes the most significant victim", leankv_case(),
       [](auto p) { return std::make_unique<ProudLeanKv>(std::move(p)); }},
      {"leankv keeps an insignificant low victim", leankv_case(),
       [](auto p) { return std::make_unique<HoardingLeanKv>(std::move(p)); }},
      {"pyramidkv gives every layer the mean budget",
       policy_case("pyramidkv", 10, 2, 4.0, "pyramidkv:budget=10,ratio=4,window=2,pool=3"),
       [](auto p) { return std::make_unique<FlatPyramidKv>(std::move(p), make_snapkv_policy(10, 2, 3)); }},
      {"spvllm free-block never frees an emptied page",
       [&] {
         PolicyCase pc = policy_case("h2o", 2, 1, 0.5, "spvllm:budget=2,recent=0.5,strategy=free-block");
         pc.c = 2;  // 1 + the index of free-block
         return pc;
       }(),
       [](auto p) { return std::make_unique<NoFreeSpvLlm>(std::move(p)); }},
      {"kivi flushes its residual one group late", policy_case("kivi", 16, 16, 0, "kivi2:group=16,residual=16"),
       [](auto p) { return std::make_unique<LateFlushKivi>(std::move(p)); }},
      {"minikv evicts while decoding",
       policy_case("minikv", 8, 16, 0.5, "minikv:budget=8,recent=0.5,residual=16,value_group=8"),
       [](auto p) { return std::make_unique<DecodingMiniKv>(std::move(p)); }},
      {"static leankv keeps the low victim (the low tier outgrows its budget)", static_case(3, 2),
       [](auto p) { return std::make_unique<HoardingLeanKv>(std::move(p)); }},
      {"static leankv ranks its high victim by score, not significance", static_case(3, 2),
       [](auto p) { return std::make_unique<RawScoreStaticLeanKv>(std::move(p)); }},
  };
  std::mt19937_64 rng(20261123);
  for (const Planted& bug : planted) {
    std::string caught;
    for (int i = 0; i < 200 && caught.empty(); ++i) {
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
