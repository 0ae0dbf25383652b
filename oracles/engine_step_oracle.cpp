#include "oracles/engine_step_oracle.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "oracles/held_rows_ref.h"
#include "oracles/held_set_builders.h"

namespace kvcheck {

EngineStepOracle::EngineStepOracle(Engine& engine, std::int64_t max_reports, Observer observe)
    : engine_(engine), max_reports_(max_reports), observe_(std::move(observe)) {
  begin({});
  trace_.on_kv = [this](std::int64_t, std::int32_t layer, std::int32_t first, std::int64_t tokens,
                        std::span<const float> k, std::span<const float> v) { on_kv(layer, first, tokens, k, v); };
  trace_.on_decode_head = [this](const DecodeHeadTrace& s) { on_decode_head(s); };
  trace_.on_demote = [this](std::int64_t, std::int32_t layer, std::int32_t head, std::int32_t position) {
    demoted_.insert({layer, head, position});
  };
  engine_.runner->set_trace(&trace_);
}

void EngineStepOracle::observe_prompt(PromptObserver observe) {
  trace_.on_prompt_scores = [observe = std::move(observe)](std::int64_t, std::int64_t kv_heads,
                                                           std::span<const PromptScores> heads) {
    if (observe) observe(kv_heads, heads);
  };
}

EngineStepOracle::~EngineStepOracle() { engine_.runner->set_trace(nullptr); }

void EngineStepOracle::begin(std::string label) {
  label_ = std::move(label);
  keys_.assign(static_cast<std::size_t>(engine_.weights.config.num_hidden_layers), {});
  values_.assign(keys_.size(), {});
  demoted_.clear();
}

void EngineStepOracle::on_kv(std::int32_t layer, std::int32_t first, std::int64_t tokens, std::span<const float> k,
                             std::span<const float> v) {
  const auto kv_dim = static_cast<std::size_t>(engine_.weights.config.kv_dim());
  std::vector<float>& ks = keys_.at(static_cast<std::size_t>(layer));
  std::vector<float>& vs = values_.at(static_cast<std::size_t>(layer));
  // Rows arrive in position order: the prompt, then one per step (a replay rewrites them).
  if (first == 0) prompt_len_ = tokens;
  const std::size_t at = static_cast<std::size_t>(first) * kv_dim;
  ks.resize(std::max(ks.size(), at + static_cast<std::size_t>(tokens) * kv_dim));
  vs.resize(ks.size());
  std::copy(k.begin(), k.end(), ks.begin() + static_cast<std::ptrdiff_t>(at));
  std::copy(v.begin(), v.end(), vs.begin() + static_cast<std::ptrdiff_t>(at));
}

void EngineStepOracle::on_decode_head(const DecodeHeadTrace& s) {
  const ModelConfig& c = engine_.weights.config;
  const std::int64_t d = c.head_dim;
  const auto kv_dim = static_cast<std::size_t>(c.kv_dim());
  const std::int64_t context = static_cast<std::int64_t>(s.position) + 1;
  std::vector<LiveToken> live;
  std::vector<SlotRef> slots;
  engine_.cache->live_tokens(s.request, s.layer, s.kv_head, live, slots);
  HeldSet h;
  h.slots = slots;
  // Exact rows of this head over the context, and the held ones as their tier stores them.
  h.keys.resize(static_cast<std::size_t>(context * d));
  h.values.resize(h.keys.size());
  const std::vector<float>& ks = keys_.at(static_cast<std::size_t>(s.layer));
  const std::vector<float>& vs = values_.at(static_cast<std::size_t>(s.layer));
  for (std::int64_t j = 0; j < context; ++j) {
    const std::size_t from = static_cast<std::size_t>(j) * kv_dim + static_cast<std::size_t>(s.kv_head * d);
    std::copy_n(ks.begin() + static_cast<std::ptrdiff_t>(from), d, h.keys.begin() + j * d);
    std::copy_n(vs.begin() + static_cast<std::ptrdiff_t>(from), d, h.values.begin() + j * d);
  }
  h.order.resize(live.size());
  for (std::size_t i = 0; i < h.order.size(); ++i) h.order[i] = i;
  std::sort(h.order.begin(), h.order.end(),
            [&](std::size_t a, std::size_t b) { return live[a].position < live[b].position; });
  for (std::size_t i : h.order) {
    const std::int32_t j = live[i].position;
    h.held.push_back(j);
    h.tokens.push_back(HeldToken{j, slots[i].tier, slots[i].tier == kLowTier && demoted_.contains({s.layer, s.kv_head, j})});
  }
  std::vector<KvTier> tiers;
  for (const TierRead& t : engine_.cache->tiers()) tiers.push_back(t.tier);
  const KvPolicy& policy = engine_.cache->policy();
  h.spec = HeldRowsSpec{tiers, policy.residual_tokens() > 0, prompt_len_, d};
  h.q.assign(s.q.begin(), s.q.end());
  h.out.assign(s.out.begin(), s.out.end());
  // A policy feature's part (oracles/held_set_builders.h) around the plain derivation.
  std::vector<const HeldSetBuilder*> builders;
  for (const HeldSetBuilder& b : held_set_builders()) {
    if (b.applies(policy)) builders.push_back(&b);
  }
  for (const HeldSetBuilder* b : builders) {
    if (b->before_rows) b->before_rows(engine_, s, h);
  }
  const bool stored = !h.stored_keys.empty();
  held_rows_ref(h.spec, stored ? h.stored_keys : h.keys, stored ? h.stored_values : h.values, h.tokens, h.held_keys,
                h.held_values);
  for (const HeldSetBuilder* b : builders) {
    if (b->after_rows) b->after_rows(engine_, s, h);
  }
  DecodeStepInputs in;
  in.group = c.group_size();
  in.head_dim = d;
  in.scale = 1.0 / std::sqrt(static_cast<double>(d));
  in.q = h.q;
  in.engine_out = h.out;
  in.output_rounding = h.output_rounding;
  in.keys = h.keys;
  in.values = h.values;
  in.held = h.held;
  in.held_keys = h.held_keys;
  in.held_values = h.held_values;
  const DecodeStepCheck r = check_decode_step(in);
  ++checks_;
  held_error_max_ = std::max(held_error_max_, r.held_error);
  full_error_max_ = std::max(full_error_max_, r.full_error);
  pruned_mass_max_ = std::max(pruned_mass_max_, r.pruned_mass);
  delta_max_ = std::max(delta_max_, r.delta);
  if (r.full_bound > 0) bound_use_max_ = std::max(bound_use_max_, r.full_error / r.full_bound);
  if (observe_) observe_(EngineStepHead{s, live, slots, r});
  if (!h.selection_violation.empty()) {
    ++selection_violations_;
    if (static_cast<std::int64_t>(reports_.size()) < max_reports_) {
      reports_.push_back(fmt::format("oracle violation: {}, position {}, layer {}, kv head {}: page selection: {}", label_,
                                     s.position, s.layer, s.kv_head, h.selection_violation));
    }
  }
  if (r.ok()) return;
  held_violations_ += r.held_violated ? 1 : 0;
  full_violations_ += r.full_violated ? 1 : 0;
  if (static_cast<std::int64_t>(reports_.size()) < max_reports_) {
    reports_.push_back(fmt::format("oracle violation: {}, position {}, layer {}, kv head {}, {} tokens held of {}: {}",
                                   label_, s.position, s.layer, s.kv_head, h.held.size(), context, r.describe()));
  }
}

nlohmann::json EngineStepOracle::summary() const {
  return {{"oracle_checks", checks_},
          {"oracle_violations", held_violations_ + full_violations_ + selection_violations_},
          {"held_violations", held_violations_},
          {"bound_violations", full_violations_},
          {"selection_violations", selection_violations_},
          {"held_error_max", held_error_max_},
          {"full_error_max", full_error_max_},
          {"bound_use_max", bound_use_max_},
          {"pruned_mass_max", pruned_mass_max_},
          {"delta_max", delta_max_}};
}

}  // namespace kvcheck
