// Every registered policy held to the per-step oracle on small random models, with random
// parameters. At every decode step, for every layer and kv head:
//
//   attention  the per-step oracle the CLI gates on (oracles/engine_step_oracle.h): each query
//              head's output equals exact attention (double) over exactly the positions the head
//              holds, with those positions' keys and values as the runner computed them, stored
//              as their tier stores them (a demoted token through the high format, then the low
//              one), and stays within the bound around exact attention over the whole context;
//   the claim  the policy's row of the table below (policy_step_table.h): the set of positions it
//              holds, their tiers, their scores and, for H2O and LeanKV, exactly the decisions
//              the paper's rule makes from those scores, written out again here.
//
// A new policy adds one row (docs/developer/adding-a-policy.md); EveryRegisteredPolicyHasARow fails until
// it has one. The planted-bug test is policy_planted_bugs_props.cpp.
//
//   RC_PARAMS="seed=N" build/properties/kvcheck_property_tests --gtest_filter='PolicyStepProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "optimized/adakv_policy.h"
#include "optimized/eviction_policies.h"
#include "optimized/leankv_policy.h"
#include "properties/optimized/policy_step_table.h"
#include "properties/support/property_check.h"

namespace kvcheck::testing {
namespace {

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

// LeanKV's claims common to both modes: the recent window held, at high; the scores; and
// exactly the moves and drops `rule` makes from the previous step's scores.
void check_leankv_tiers(std::int64_t window, const HeadStep& s,
                        const std::function<std::pair<std::int32_t, std::int32_t>(const std::vector<LiveToken>&)>& rule) {
  const std::int32_t p = s.position;
  for (const LiveToken& t : s.live) {
    if (t.position > p - window && t.tier != 0) s.fail(fmt::format("recent position {} is not at high", t.position));
  }
  s.require_held(p - static_cast<std::int32_t>(window) + 1, p, "leankv dropped recent position");
  const std::optional<std::vector<LiveToken>> before = s.require_accumulated_scores();
  if (!before) return;
  const auto [want_demoted, want_evicted] = rule(*before);
  std::map<std::int32_t, int> tier_now;
  for (const LiveToken& t : s.live) tier_now[t.position] = t.tier;
  for (const LiveToken& t : *before) {
    const bool gone = !tier_now.contains(t.position);
    const bool moved = !gone && t.tier == 0 && tier_now[t.position] == 1;
    if (gone != (t.position == want_evicted) || moved != (t.position == want_demoted)) {
      s.fail(fmt::format("position {} (tier {}) dropped {} moved {}; Algorithm 1 drops {} and moves {}", t.position,
                         t.tier, gone, moved, want_evicted, want_demoted));
    }
    if (!gone && !moved && tier_now[t.position] != t.tier) s.fail(fmt::format("position {} changed tier", t.position));
  }
}

// A prompt selection made at prefill: the generated tokens and the window all held, `budget`
// prompt tokens (all of a shorter prompt), never changed while decoding.
void check_prompt_selection(const char* name, std::int64_t budget, std::int64_t window, const HeadStep& s,
                            HeadMemory& m) {
  const std::int64_t T = s.prompt_len;
  const std::set<std::int32_t> prompt_part = s.prompt_part();
  s.require_held(static_cast<std::int32_t>(T), s.position, fmt::format("{} dropped generated position", name));
  if (static_cast<std::int64_t>(prompt_part.size()) != std::min<std::int64_t>(T, budget)) {
    s.fail(fmt::format("{} holds {} prompt tokens, budget {}", name, prompt_part.size(), budget));
  }
  s.require_held(static_cast<std::int32_t>(T - window), static_cast<std::int32_t>(T - 1),
                 fmt::format("{} dropped window position", name));
  if (m.seen && prompt_part != m.prompt_kept) s.fail(fmt::format("{} changed its prompt tokens during decode", name));
  m.prompt_kept = prompt_part;
  m.seen = true;
}

// KIVI's tiers: the residual (tier 0) holds 1..n_r tokens; tier 1 whole groups of G, append-only;
// every generated token held.
void check_residual_tiers(const char* name, std::int64_t group, std::int64_t residual, const HeadStep& s,
                          HeadMemory& m) {
  std::set<std::int32_t> low;
  for (const LiveToken& t : s.live) {
    if (t.tier == 1) low.insert(t.position);
  }
  const auto held = static_cast<std::int64_t>(s.live.size() - low.size());
  if (held < 1 || held > residual) s.fail(fmt::format("residual of {} tokens, n_r {}", held, residual));
  if (static_cast<std::int64_t>(low.size()) % group != 0) s.fail(fmt::format("{} quantized tokens", low.size()));
  if (!std::includes(low.begin(), low.end(), m.low.begin(), m.low.end())) s.fail("a quantized token left the quantized tier");
  m.low = low;
  s.require_held(static_cast<std::int32_t>(s.prompt_len), s.position, fmt::format("{} dropped generated position", name));
}

}  // namespace

void check_uniform(const UniformCase&, const HeadStep& s, HeadMemory&) {
  for (const LiveToken& t : s.live) {
    if (t.tier != 0) s.fail("holds a token in a second tier");
  }
  if (static_cast<std::int32_t>(s.held.size()) != s.position + 1) s.fail("dropped a token");
}

std::string StreamingCase::spec() const { return fmt::format("streaming:sinks={},window={}", sinks, window); }

void check_streaming(const StreamingCase& c, const HeadStep& s, HeadMemory&) {
  const std::int32_t p = s.position;
  std::set<std::int32_t> want;
  for (std::int32_t j = 0; j <= p; ++j) {
    if (j < c.sinks || j > p - c.window || p + 1 <= c.sinks + c.window) want.insert(j);
  }
  if (s.held != want) s.fail("streaming holds the wrong positions");
}

std::int64_t H2oCase::recent_tokens() const {
  return std::clamp<std::int64_t>(std::llround(static_cast<double>(budget) * recent), 1, budget);
}
std::string H2oCase::spec() const { return fmt::format("h2o:budget={},recent={}", budget, recent); }

namespace {

// H2O's tokens: the count, the recent window, the scores, and the token H2O's rule evicts.
void check_h2o_tokens(const H2oCase& c, const HeadStep& s) {
  const std::int32_t p = s.position;
  if (static_cast<std::int64_t>(s.held.size()) != std::min<std::int64_t>(p + 1, c.budget)) {
    s.fail(fmt::format("h2o holds {} tokens, budget {}", s.held.size(), c.budget));
  }
  s.require_held(p - static_cast<std::int32_t>(c.recent_tokens()) + 1, p, "h2o dropped recent position");
  const std::optional<std::vector<LiveToken>> before = s.require_accumulated_scores();
  if (!before) return;
  std::map<std::int32_t, float> scores;  // after the previous step's update
  for (const LiveToken& t : *before) scores[t.position] = t.score;
  std::optional<std::int32_t> victim;  // H2O's rule, written out again
  if (static_cast<std::int64_t>(scores.size()) >= c.budget) {
    for (const auto& [pos, score] : scores) {
      if (pos > p - c.recent_tokens()) continue;
      if (!victim || score < scores[*victim]) victim = pos;
    }
  }
  for (const auto& [pos, score] : scores) {
    const bool gone = !s.held.contains(pos);
    if (gone != (victim && *victim == pos)) {
      s.fail(fmt::format("position {} evicted {}, H2O's rule says {}", pos, gone, victim ? *victim : -1));
    }
  }
}

// The pages a slot strategy leaves after the step (SpvLLM's four; H2O's own is slot-reuse).
void check_slot_strategy(SlotStrategy strategy, std::int64_t budget, const HeadStep& s, HeadMemory& m) {
  const auto pages = static_cast<std::int64_t>(s.high_page_live.size());
  const std::int64_t tpp = s.tokens_per_page;
  if (strategy == SlotStrategy::kNoOp && pages < m.high_pages) s.fail("no-op freed a page");
  if (strategy == SlotStrategy::kFreeBlock) {
    for (std::int64_t i = 0; i + 1 < pages; ++i) {
      if (s.high_page_live[static_cast<std::size_t>(i)] == 0) s.fail(fmt::format("free-block kept empty page {}", i));
    }
  }
  // Packed after each eviction; the append after it may open one more page.
  const auto held = static_cast<std::int64_t>(s.held.size());
  if (strategy == SlotStrategy::kSparseCopy && pages > (held + tpp - 1) / tpp + 1) {
    s.fail(fmt::format("sparse-copy holds {} pages for {} tokens", pages, held));
  }
  if (strategy == SlotStrategy::kSlotReuse && pages > (budget + tpp - 1) / tpp + 1) {
    s.fail(fmt::format("slot-reuse holds {} pages for a budget of {}", pages, budget));
  }
  m.high_pages = pages;
}

}  // namespace

void check_h2o(const H2oCase& c, const HeadStep& s, HeadMemory& m) {
  check_h2o_tokens(c, s);
  check_slot_strategy(SlotStrategy::kSlotReuse, c.budget, s, m);
}

std::string SpvLlmCase::spec() const {
  return fmt::format("spvllm:budget={},recent={},strategy={}", h2o.budget, h2o.recent, slot_strategy_name(strategy));
}

void check_spvllm(const SpvLlmCase& c, const HeadStep& s, HeadMemory& m) {
  check_h2o_tokens(c.h2o, s);
  check_slot_strategy(c.strategy, c.h2o.budget, s, m);
}

std::string SnapKvCase::spec() const { return fmt::format("snapkv:budget={},window={},pool={}", budget, window, pool); }

void check_snapkv(const SnapKvCase& c, const HeadStep& s, HeadMemory& m) {
  check_prompt_selection("snapkv", c.budget, c.window, s, m);
}

std::string PyramidKvCase::spec() const {
  return fmt::format("pyramidkv:budget={},ratio={},window={},pool={}", budget, ratio, window, pool);
}

void check_pyramidkv(const PyramidKvCase& c, const HeadStep& s, HeadMemory& m) {
  const std::int64_t layer_budget = pyramid_budgets(c.budget, c.ratio, c.window, static_cast<std::int32_t>(s.layers),
                                                    s.prompt_len)
                                        .at(static_cast<std::size_t>(s.layer));
  check_prompt_selection("pyramidkv", layer_budget, c.window, s, m);
}

std::string XkvCase::spec() const { return fmt::format("xkv:budget={},window={},pool={}", budget, window, pool); }

void check_xkv(const XkvCase& c, const HeadStep& s, HeadMemory& m) {
  // The count is per layer, checked over the layers after the request (check_run).
  const std::set<std::int32_t> prompt_part = s.prompt_part();
  s.require_held(static_cast<std::int32_t>(s.prompt_len), s.position, "xkv dropped generated position");
  s.require_held(static_cast<std::int32_t>(s.prompt_len - c.window), static_cast<std::int32_t>(s.prompt_len - 1),
                 "xkv dropped window position");
  if (m.seen && m.prompt_kept != prompt_part) s.fail("xkv changed its prompt tokens during decode");
  m.prompt_kept = prompt_part;
  m.seen = true;
}

std::string XkvCase::check_run(const PolicyRunEnd& end) const {
  // The heads of a layer keep as many prompt tokens; the layers' budgets sum to the total.
  const std::int64_t L = end.layers, T = end.prompt_len, w = window;
  std::int64_t sum = 0;
  for (std::int32_t l = 0; l < L; ++l) {
    const std::size_t count = end.heads.at({l, 0}).prompt_kept.size();
    for (std::int32_t h = 1; h < end.kv_heads; ++h) {
      if (end.heads.at({l, h}).prompt_kept.size() != count) return fmt::format("layer {} heads keep different counts", l);
    }
    sum += static_cast<std::int64_t>(count);
  }
  const std::int64_t candidates = std::max<std::int64_t>(0, T - w);
  const std::int64_t want = L * std::min(T, w) + std::min(L * std::max<std::int64_t>(0, budget - w), L * candidates);
  if (sum != want) return fmt::format("the layers keep {} prompt tokens per head in all, the total is {}", sum, want);
  return "";
}

std::string AdaKvCase::spec() const {
  return pyramid ? fmt::format("adakv:budget={},base=pyramidkv,floor={},ratio={},window={},pool={}", budget, floor,
                               ratio, window, pool)
                 : fmt::format("adakv:budget={},base=snapkv,floor={},window={},pool={}", budget, floor, window, pool);
}

void check_adakv(const AdaKvCase& c, const HeadStep& s, HeadMemory& m) {
  // The counts and the choice are across the heads, checked after the request (check_run).
  const std::set<std::int32_t> prompt_part = s.prompt_part();
  s.require_held(static_cast<std::int32_t>(s.prompt_len), s.position, "adakv dropped generated position");
  s.require_held(static_cast<std::int32_t>(s.prompt_len - c.window), static_cast<std::int32_t>(s.prompt_len - 1),
                 "adakv dropped window position");
  if (m.seen && m.prompt_kept != prompt_part) s.fail("adakv changed its prompt tokens during decode");
  m.prompt_kept = prompt_part;
  m.seen = true;
}

namespace {

// SnapKV's max pooling written out again: each score the maximum of the `pool` centred ones.
std::vector<float> max_pooled(const std::vector<float>& x, std::int64_t pool) {
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<float> out(x.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const auto from = x.begin() + std::max<std::int64_t>(0, i - pool / 2);
    const auto to = x.begin() + std::min(n, i + pool / 2 + 1);
    out[static_cast<std::size_t>(i)] = *std::max_element(from, to);
  }
  return out;
}

}  // namespace

std::string AdaKvCase::check_run(const PolicyRunEnd& end) const {
  const std::int64_t T = end.prompt_len, H = end.kv_heads;
  AdaKvParams p;
  p.budget = budget;
  p.base = pyramid ? AdaKvBase::kPyramidKv : AdaKvBase::kSnapKv;
  p.floor = floor;
  p.ratio = ratio;
  p.window = window;
  for (std::int32_t l = 0; l < end.layers; ++l) {
    const std::int64_t b = adakv_layer_budget(p, l, static_cast<std::int32_t>(end.layers), T);
    std::int64_t sum = 0;
    for (std::int32_t h = 0; h < H; ++h) sum += static_cast<std::int64_t>(end.heads.at({l, h}).prompt_kept.size());
    if (sum != H * std::min(T, b)) {
      return fmt::format("layer {}: the heads keep {} prompt tokens in all, the layer's total is {} x {}", l, sum, H,
                         std::min(T, b));
    }
    if (T <= b) continue;
    // The order of (head, position) pairs: higher pooled score first, then the lower head, then
    // the lower position. Every head's floor is its own top f; above the floors, every kept pair
    // comes before every dropped one.
    const std::int64_t candidates = T - window, f = adakv_floor_tokens(p, b);
    std::vector<std::vector<float>> scores;
    for (std::int32_t h = 0; h < H; ++h) {
      const std::vector<float>& w = end.window_scores.at(static_cast<std::size_t>(l * H + h));
      scores.push_back(max_pooled({w.begin(), w.begin() + candidates}, pool));
    }
    using Pair = std::tuple<float, std::int32_t, std::int32_t>;  // (-score, head, position)
    std::optional<Pair> last_kept, first_dropped;
    for (std::int32_t h = 0; h < H; ++h) {
      const std::set<std::int32_t>& kept = end.heads.at({l, h}).prompt_kept;
      std::vector<Pair> own;
      for (std::int32_t j = 0; j < candidates; ++j) own.emplace_back(-scores[static_cast<std::size_t>(h)][static_cast<std::size_t>(j)], h, j);
      std::sort(own.begin(), own.end());
      for (std::int64_t i = 0; i < candidates; ++i) {
        const Pair& q = own[static_cast<std::size_t>(i)];
        const bool held = kept.contains(std::get<2>(q));
        if (i < f) {
          if (!held) return fmt::format("layer {} head {} dropped position {}, one of its top {} (its floor)", l, h, std::get<2>(q), f);
          continue;
        }
        if (held && (!last_kept || *last_kept < q)) last_kept = q;
        if (!held && (!first_dropped || q < *first_dropped)) first_dropped = q;
      }
    }
    if (last_kept && first_dropped && *first_dropped < *last_kept) {
      return fmt::format("layer {}: head {} keeps position {} (score {}) while head {} drops position {} (score {})", l,
                         std::get<1>(*last_kept), std::get<2>(*last_kept), -std::get<0>(*last_kept),
                         std::get<1>(*first_dropped), std::get<2>(*first_dropped), -std::get<0>(*first_dropped));
    }
  }
  return "";
}

std::string DuoCase::spec() const {
  return heads.empty() ? fmt::format("duo:retrieval={},sinks={},recent={}", retrieval, sinks, recent)
                       : fmt::format("duo:sinks={},recent={},heads={}", sinks, recent, fmt::join(heads, "/"));
}

bool DuoCase::retrieves(std::int64_t layer, std::int64_t head, std::int64_t layers, std::int64_t kv_heads) const {
  const std::int64_t flat = layer * kv_heads + head;
  if (heads.empty()) return static_cast<double>(flat) < std::ceil(retrieval * static_cast<double>(layers * kv_heads));
  return std::find(heads.begin(), heads.end(), flat) != heads.end();
}

void check_duo(const DuoCase& c, const HeadStep& s, HeadMemory&) {
  const std::int32_t p = s.position;
  const bool retrieval = c.retrieves(s.layer, s.kv_head, s.layers, s.kv_heads);
  std::set<std::int32_t> want;
  for (std::int32_t j = 0; j <= p; ++j) {
    if (retrieval || j < c.sinks || j > p - c.recent || p + 1 <= c.sinks + c.recent) want.insert(j);
  }
  if (s.held != want) {
    s.fail(fmt::format("duo {} head holds {} positions, {} expected", retrieval ? "retrieval" : "streaming",
                       s.held.size(), want.size()));
  }
}

std::string LeanKvCase::spec() const {
  return fmt::format("leankv:alpha_h={},alpha_l={},window={},high_k={},high_v={},low_k={},low_v={}", alpha_h, alpha_l,
                     window, bits.high_k, bits.high_v, bits.low_k, bits.low_v) +
         (rotation.empty() ? "" : "," + rotation);
}

void check_leankv(const LeanKvCase& c, const HeadStep& s, HeadMemory&) {
  check_leankv_tiers(c.window, s, [&](const std::vector<LiveToken>& before) {
    return leankv_rule(before, s.position, c.window, c.alpha_h, c.alpha_l);
  });
}

std::string StaticLeanKvCase::spec() const {
  return fmt::format("leankv:static_high={},static_low={},window={},high_k={},high_v={},low_k={},low_v={}", high, low,
                     window, bits.high_k, bits.high_v, bits.low_k, bits.low_v);
}

void check_static_leankv(const StaticLeanKvCase& c, const HeadStep& s, HeadMemory&) {
  LeanKvParams lp;
  lp.window = c.window;
  lp.static_high = c.high;
  lp.static_low = c.low;
  const auto [want_high, want_low] = leankv_static_counts(lp, s.position);
  std::int64_t high = 0, low = 0;
  for (const LiveToken& t : s.live) ++(t.tier == 0 ? high : low);
  if (high != want_high || low != want_low) {
    s.fail(fmt::format("static leankv holds {} high and {} low tokens, every head must hold {} and {}", high, low,
                       want_high, want_low));
  }
  check_leankv_tiers(c.window, s, [&](const std::vector<LiveToken>& before) {
    return leankv_static_rule(before, s.position, c.window, c.high, c.low);
  });
}

std::string KiviCase::spec() const {
  return fmt::format("kivi{}:group={},residual={}", bits, group, residual) + (rotation.empty() ? "" : "," + rotation);
}

std::string draw_rotation() {
  return *rc::gen::element(0, 1) == 0
             ? std::string("rotate=hadamard")
             : fmt::format("rotate=hadamard-signs,rotate_seed={}", *rc::gen::inRange<std::int64_t>(0, 1000000));
}

void check_kivi(const KiviCase& c, const HeadStep& s, HeadMemory& m) {
  check_residual_tiers("kivi", c.group, c.residual, s, m);
  if (static_cast<std::int64_t>(s.held.size()) != s.position + 1) s.fail("kivi dropped a token");
  // The oldest tokens are the quantized ones.
  for (std::int32_t j : m.low) {
    if (j >= static_cast<std::int32_t>(m.low.size())) s.fail(fmt::format("quantized position {} is not among the oldest", j));
  }
}

std::int64_t MiniKvCase::recent_tokens() const {
  return std::clamp<std::int64_t>(std::llround(static_cast<double>(budget) * recent), 1, budget);
}
std::string MiniKvCase::spec() const {
  return fmt::format("minikv:budget={},recent={},pyramid={},group={},residual={},value_group={}", budget, recent,
                     pyramid, group, residual, value_group);
}

void check_minikv(const MiniKvCase& c, const HeadStep& s, HeadMemory& m) {
  check_residual_tiers("minikv", c.group, c.residual, s, m);
  const std::int64_t T = s.prompt_len;
  const std::int64_t budget =
      c.pyramid > 1.0
          ? pyramid_budgets(c.budget, c.pyramid, c.recent_tokens(), static_cast<std::int32_t>(s.layers), T)
                .at(static_cast<std::size_t>(s.layer))
          : c.budget;
  const std::set<std::int32_t> prompt_part = s.prompt_part();
  if (static_cast<std::int64_t>(prompt_part.size()) != std::min<std::int64_t>(T, budget)) {
    s.fail(fmt::format("minikv holds {} prompt tokens, budget {}", prompt_part.size(), budget));
  }
  const std::int64_t window =
      T <= budget ? T : std::clamp<std::int64_t>(std::llround(static_cast<double>(budget) * c.recent), 1, budget);
  s.require_held(static_cast<std::int32_t>(T - window), static_cast<std::int32_t>(T - 1),
                 "minikv dropped recent prompt position");
  if (m.seen && prompt_part != m.prompt_kept) s.fail("minikv changed its prompt tokens during decode");
  m.prompt_kept = prompt_part;
  m.seen = true;
}

namespace {

LeanKvBits draw_leankv_bits() {
  const auto [hk, hv, lk, lv] = *rc::gen::element(std::tuple{8, 4, 4, 2}, std::tuple{16, 16, 8, 8}, std::tuple{8, 8, 2, 2});
  return {hk, hv, lk, lv};
}

H2oCase draw_h2o() {
  H2oCase c;
  c.budget = *rc::gen::inRange<std::int64_t>(1, 16);
  c.recent = *rc::gen::element(0.0, 0.25, 0.5, 1.0);
  return c;
}

KiviCase draw_kivi(int bits) {
  KiviCase c;
  c.bits = bits;
  c.group = 16;  // the smallest group; the tiny heads have 8 or 16 channels
  c.residual = *rc::gen::element<std::int64_t>(16, 32);
  return c;
}

KiviCase draw_rotated_kivi(int bits) {
  KiviCase c = draw_kivi(bits);
  c.rotation = draw_rotation();
  return c;
}

UniformCase draw_kv_bits() {
  return {fmt::format("kv-bits:k={},v={}", *rc::gen::element(2, 4, 8, 16), *rc::gen::element(2, 4, 8, 16))};
}

}  // namespace

const std::vector<PolicyRow>& policy_step_table() {
  static const std::vector<PolicyRow> rows = {
      row("full-fp32", [] { return UniformCase{"full-fp32"}; }, check_uniform),
      row("full-fp16", [] { return UniformCase{"full-fp16"}; }, check_uniform),
      row("fp8", [] { return UniformCase{"fp8"}; }, check_uniform),
      row("int8", [] { return UniformCase{"int8"}; }, check_uniform),
      row("int4", [] { return UniformCase{"int4"}; }, check_uniform),
      row("kv-bits", draw_kv_bits, check_uniform),
      row("streaming",
          [] { return StreamingCase{*rc::gen::inRange<std::int64_t>(0, 5), *rc::gen::inRange<std::int64_t>(1, 12)}; },
          check_streaming),
      row("h2o", draw_h2o, check_h2o),
      row("spvllm", [] {
            return SpvLlmCase{draw_h2o(), kAllSlotStrategies[*rc::gen::inRange<std::size_t>(0, std::size(kAllSlotStrategies))]};
          }, check_spvllm),
      row("snapkv",
          [] {
            const auto window = *rc::gen::inRange<std::int64_t>(1, 8);
            return SnapKvCase{window + *rc::gen::inRange<std::int64_t>(1, 10), window,
                              *rc::gen::element<std::int64_t>(1, 3, 7)};
          },
          check_snapkv),
      row("pyramidkv",
          [] {
            const auto window = *rc::gen::inRange<std::int64_t>(1, 8);
            return PyramidKvCase{window + *rc::gen::inRange<std::int64_t>(1, 10), *rc::gen::element(1.0, 2.0, 20.0),
                                 window, *rc::gen::element<std::int64_t>(1, 3, 7)};
          },
          check_pyramidkv),
      row("xkv",
          [] {
            const auto window = *rc::gen::inRange<std::int64_t>(1, 6);
            return XkvCase{window + *rc::gen::inRange<std::int64_t>(1, 10), window,
                           *rc::gen::element<std::int64_t>(1, 3, 7)};
          },
          check_xkv),
      row("adakv",
          [] {
            AdaKvCase c;
            c.window = *rc::gen::inRange<std::int64_t>(1, 8);
            c.budget = c.window + *rc::gen::inRange<std::int64_t>(1, 10);
            c.pool = *rc::gen::element<std::int64_t>(1, 3, 7);
            c.floor = *rc::gen::element(0.0, 0.2, 0.5, 1.0);
            c.pyramid = *rc::gen::arbitrary<bool>();
            c.ratio = *rc::gen::element(1.0, 2.0, 20.0);
            return c;
          },
          check_adakv),
      row("duo",
          [] {
            DuoCase c;
            c.retrieval = *rc::gen::element(0.0, 0.25, 0.5, 0.75, 1.0);
            c.sinks = *rc::gen::inRange<std::int64_t>(0, 5);
            c.recent = *rc::gen::inRange<std::int64_t>(1, 12);
            // (head 0 is in every model; a calibrated set names heads explicitly)
            if (*rc::gen::element(false, true)) c.heads = {0};
            return c;
          },
          check_duo),
      row("kivi2", [] { return draw_kivi(2); }, check_kivi),
      row("kivi4", [] { return draw_kivi(4); }, check_kivi),
      // Rotated before quantization: the oracle checks them in the rotated space.
      row("int4", [] { return UniformCase{"int4:" + draw_rotation()}; }, check_uniform),
      row("int8", [] { return UniformCase{"int8:" + draw_rotation()}; }, check_uniform),
      row("kv-bits", [] { return UniformCase{draw_kv_bits().name + "," + draw_rotation()}; }, check_uniform),
      row("kivi2", [] { return draw_rotated_kivi(2); }, check_kivi),
      row("kivi4", [] { return draw_rotated_kivi(4); }, check_kivi),
      row("minikv",
          [] {
            MiniKvCase c;
            c.budget = *rc::gen::inRange<std::int64_t>(2, 24);
            c.residual = *rc::gen::element<std::int64_t>(16, 32);
            c.recent = *rc::gen::element(0.25, 0.5, 1.0);
            c.pyramid = *rc::gen::element(1.0, 4.0);
            return c;
          },
          check_minikv),
      row("leankv",
          [] {
            LeanKvCase c;
            c.window = *rc::gen::inRange<std::int64_t>(1, 9);
            c.alpha_h = *rc::gen::element(0.5, 1.0, 2.0);
            c.alpha_l = c.alpha_h * *rc::gen::element(0.02, 0.2, 0.6);
            const auto [hk, hv, lk, lv] = *rc::gen::element(std::tuple{8, 4, 4, 2}, std::tuple{4, 8, 2, 4},
                                                             std::tuple{16, 16, 8, 8}, std::tuple{8, 8, 2, 2});
            c.bits = {hk, hv, lk, lv};
            if (*rc::gen::arbitrary<bool>()) c.rotation = draw_rotation();
            return c;
          },
          check_leankv),
      row("leankv",  // static mode
          [] {
            StaticLeanKvCase c;
            c.window = *rc::gen::inRange<std::int64_t>(1, 9);
            c.high = *rc::gen::inRange<std::int64_t>(0, 8);
            c.low = *rc::gen::inRange<std::int64_t>(0, 8);
            c.bits = draw_leankv_bits();
            return c;
          },
          check_static_leankv),
      // Every token kept; the oracle checks the pages read (oracles/page_selection_ref.h).
      row("quest", [] { return UniformCase{fmt::format("quest:pages={}", *rc::gen::inRange<std::int64_t>(1, 6))}; },
          check_uniform),
  };
  return rows;
}

namespace {

TEST(PolicyStepProps, EveryStepAttendsToExactlyWhatThePolicyHolds) {
  check_property("every policy: per-step oracle and held set", 400, [] {
    const PolicyStepCase k = gen_policy_step_case();
    const std::vector<PolicyRow>& table = policy_step_table();
    const PolicyRow& r = table[*rc::gen::inRange<std::size_t>(0, table.size())];
    const DrawnPolicy drawn = r.draw();
    RC_ASSERT(drawn.spec.substr(0, drawn.spec.find(':')) == r.kind);
    const std::string failure = run_policy_steps(k, drawn, make_policy(drawn.spec));
    if (!failure.empty()) RC_FAIL(failure);
    RC_TAG(r.kind);
  });
}

TEST(PolicyStepProps, EveryRegisteredPolicyHasARow) {
  std::set<std::string> kinds;
  for (const PolicyRow& r : policy_step_table()) kinds.insert(r.kind);
  for (const std::string& name : policy_names()) {
    EXPECT_TRUE(kinds.contains(name)) << name << ": no row in properties/optimized/policy_step_table.h's table";
  }
}

}  // namespace
}  // namespace kvcheck::testing
