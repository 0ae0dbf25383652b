#include "properties/support/policy_steps.h"

#include <fmt/format.h>
#include <rapidcheck.h>

#include <algorithm>

#include "optimized/engine.h"
#include "oracles/engine_step_oracle.h"

namespace kvcheck::testing {

PolicyStepCase gen_policy_step_case() {
  PolicyStepCase k;
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

std::set<std::int32_t> HeadStep::prompt_part() const {
  std::set<std::int32_t> out;
  for (std::int32_t j : held) {
    if (j < prompt_len) out.insert(j);
  }
  return out;
}

void HeadStep::require_held(std::int32_t from, std::int32_t to, const std::string& what) const {
  for (std::int32_t j = std::max<std::int32_t>(0, from); j <= to; ++j) {
    if (!held.contains(j)) fail(fmt::format("{} {}", what, j));
  }
}

std::optional<std::vector<LiveToken>> HeadStep::scored_before() const {
  if (last == nullptr) return std::nullopt;
  std::vector<LiveToken> before = last->live;
  for (std::size_t i = 0; i < before.size(); ++i) {
    const SlotRef& r = last->slots[i];
    // Walk order: the high pages, then the low ones.
    const std::int64_t walk = r.tier == kHighTier ? r.page_index * tokens_per_page
                                                  : last->high_pages * tokens_per_page + r.page_index * tokens_per_low_page;
    before[i].score += last->probs.at(static_cast<std::size_t>(walk + r.slot));
  }
  return before;
}

std::optional<std::vector<LiveToken>> HeadStep::require_accumulated_scores() const {
  std::optional<std::vector<LiveToken>> before = scored_before();
  if (!before) return before;
  std::map<std::int32_t, float> expected;
  for (const LiveToken& t : *before) expected[t.position] = t.score;
  for (const LiveToken& t : live) {
    if (t.position == position) continue;
    if (!expected.contains(t.position) || expected[t.position] != t.score) {
      fail(fmt::format("position {} has score {}, expected {}", t.position, t.score,
                       expected.contains(t.position) ? expected[t.position] : -1.0f));
    }
  }
  return before;
}

std::string run_policy_steps(const PolicyStepCase& c, const DrawnPolicy& drawn, std::unique_ptr<KvPolicy> policy) {
  const ModelConfig config = tiny_config(c.shape);
  const ReferenceModel model = tiny_model(config, c.seed);
  EngineOptions o;
  // A per-channel key group of 16 tokens needs a page of more than a few hundred bytes.
  o.page_bytes = drawn.large_pages ? 8 * c.page_bytes : c.page_bytes;
  o.pages = 512;
  o.threads = 1;
  o.poison = true;
  std::unique_ptr<Engine> e = make_engine(model, o, std::move(policy));
  const std::vector<std::int32_t> prompt = test_tokens(c.prompt, config.vocab_size, c.seed + 1);
  const PagePool& pool = e->cache->manager().pool();
  std::map<std::pair<std::int32_t, std::int32_t>, HeadRecord> records;  // (layer, kv head)
  PolicyRunEnd end{{}, c.prompt, config.num_hidden_layers, config.num_key_value_heads, {}};
  std::string failure;
  EngineStepOracle oracle(*e, 1, [&](const EngineStepHead& h) {
    const DecodeHeadTrace& s = h.step;
    const PageTable& table = e->cache->manager().table(s.request, s.layer, s.kv_head);
    HeadStep step;
    step.layer = s.layer;
    step.kv_head = s.kv_head;
    step.position = s.position;
    step.prompt_len = c.prompt;
    step.layers = config.num_hidden_layers;
    step.kv_heads = config.num_key_value_heads;
    step.tokens_per_page = pool.tokens_per_page(kHighTier);
    step.tokens_per_low_page = pool.tokens_per_page(kLowTier);
    step.live = h.live;
    for (const LiveToken& t : h.live) step.held.insert(t.position);
    const std::int64_t high_pages = table.count(kHighTier);
    for (std::int64_t i = 0; i < high_pages; ++i) step.high_page_live.push_back(pool.live_count(table.at(kHighTier, i)));
    step.fail_ = [&](const std::string& what) {
      if (failure.empty()) {
        failure = fmt::format("{} layer {} head {} step position {}: {}", drawn.spec, s.layer, s.kv_head, s.position, what);
      }
    };
    const auto key = std::make_pair(s.layer, s.kv_head);
    const auto last = records.find(key);
    step.last = last == records.end() ? nullptr : &last->second;
    drawn.check(step, end.heads[key]);
    records[key] = HeadRecord{{h.live.begin(), h.live.end()}, {h.slots.begin(), h.slots.end()},
                              {s.slot_probs.begin(), s.slot_probs.end()}, high_pages};
  });
  oracle.observe_prompt([&](std::int64_t, std::span<const PromptScores> heads) {
    end.window_scores.clear();
    for (const PromptScores& h : heads) end.window_scores.emplace_back(h.window.begin(), h.window.end());
  });
  oracle.begin(drawn.spec);
  EngineGenerateOptions go;
  go.max_new_tokens = c.steps;
  go.stop_at_eos = false;
  const EngineGenerateResult r = engine_generate(*e, 0, prompt, go);
  if (!failure.empty()) return failure;
  if (!oracle.reports().empty()) return oracle.reports().front();
  if (drawn.check_run && !end.heads.empty()) {
    if (std::string f = drawn.check_run(end); !f.empty()) return drawn.spec + ": " + f;
  }
  const std::int64_t want = (static_cast<std::int64_t>(r.generated.size()) - 1) * end.layers * end.kv_heads;
  if (oracle.checks() != want) return fmt::format("{} checks for {} generated tokens", oracle.checks(), r.generated.size());
  return "";
}

}  // namespace kvcheck::testing
