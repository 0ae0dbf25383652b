#include "oracles/engine_step_oracle.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "oracles/held_rows_ref.h"
#include "oracles/held_set_builders.h"

namespace kvcheck {
namespace {

bool same_format(const KvFormat& a, const KvFormat& b) {
  return a.dtype == b.dtype && a.spec.bits == b.spec.bits && a.spec.granularity == b.spec.granularity &&
         a.spec.group == b.spec.group;
}

bool same_tiers(std::span<const KvTier> a, std::span<const KvTier> b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!same_format(a[i].key, b[i].key) || !same_format(a[i].value, b[i].value) || a[i].key_range != b[i].key_range) {
      return false;
    }
  }
  return true;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

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
  memos_.clear();
  derived_memos_.clear();
}

void EngineStepOracle::on_kv(std::int32_t layer, std::int32_t first, std::int64_t tokens, std::span<const float> k,
                             std::span<const float> v) {
  const auto kv_dim = static_cast<std::size_t>(engine_.weights.config.kv_dim());
  std::vector<float>& ks = keys_.at(static_cast<std::size_t>(layer));
  std::vector<float>& vs = values_.at(static_cast<std::size_t>(layer));
  // Rows arrive in position order: the prompt, then one per step (a replay rewrites them).
  if (first == 0) prompt_len_ = tokens;
  const std::size_t at = static_cast<std::size_t>(first) * kv_dim;
  const std::size_t end = at + static_cast<std::size_t>(tokens) * kv_dim;
  if (ks.capacity() < end) {
    // Room for the steps to come (one row each), as memo_held_rows keeps it.
    ks.reserve(end + end / 4 + 64 * kv_dim);
    vs.reserve(ks.capacity());
  }
  ks.resize(std::max(ks.size(), end));
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
  // The scratch set of the last call: its buffers (a few MB at 8K tokens) keep their memory, so a
  // check does not pay for fresh pages; every field is set or cleared below.
  HeldSet& h = scratch_;
  h.slots = slots;
  h.stored_keys.clear();
  h.stored_values.clear();
  h.tokens.clear();
  h.held.clear();
  h.output_rounding = 0.0;
  h.selection_violation.clear();
  h.derived_keys = h.derived_values = nullptr;
  if (memo_on_) {
    auto& [keys_memo, values_memo] = derived_memos_[{s.request, s.layer, s.kv_head}];
    h.derived_keys = &keys_memo;
    h.derived_values = &values_memo;
  }
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
  const std::span<const float> in_keys = stored ? h.stored_keys : h.keys, in_values = stored ? h.stored_values : h.values;
  if (memo_on_) {
    memo_held_rows(memos_[{s.request, s.layer, s.kv_head}], h.spec, in_keys, in_values, h.tokens, h.held_keys,
                   h.held_values);
  } else {
    held_rows_ref(h.spec, in_keys, in_values, h.tokens, h.held_keys, h.held_values);
    rows_derived_ += static_cast<std::int64_t>(h.tokens.size());
  }
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
  if (observe_) observe_(EngineStepHead{s, live, slots, r, h.held, h.held_keys, h.held_values});
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

void EngineStepOracle::memo_held_rows(HeldRowsMemo& m, const HeldRowsSpec& spec, std::span<const float> keys,
                                      std::span<const float> values, std::span<const HeldToken> held,
                                      std::vector<float>& held_keys, std::vector<float>& held_values) {
  using Kind = HeldRowsMemo::Kind;
  const std::int64_t d = spec.head_dim;
  const auto ud = static_cast<std::size_t>(d);
  // A residual policy's tier-1 tokens are derived G at a time; a count that is not whole groups
  // is held_rows_ref's error to raise, and nothing of this check is kept.
  std::vector<std::size_t> low;  // indices into held
  if (spec.residual) {
    for (std::size_t i = 0; i < held.size(); ++i) {
      if (held[i].tier == 1) low.push_back(i);
    }
  }
  const std::int64_t G =
      low.empty() ? 1 : (spec.fp8_page_tokens > 0 ? spec.fp8_page_tokens : spec.tiers[1].key.spec.token_group());
  std::int32_t last = -1;
  for (const HeldToken& t : held) last = std::max(last, t.position);
  if (d <= 0 || G <= 0 || static_cast<std::int64_t>(low.size()) % G != 0 ||
      keys.size() < static_cast<std::size_t>(last + 1) * ud || values.size() < keys.size()) {
    m = HeldRowsMemo{};
    held_rows_ref(spec, keys, values, held, held_keys, held_values);
    rows_derived_ += static_cast<std::int64_t>(held.size());
    return;
  }
  // Every row depends on these: when any changed, nothing is reused. The FP8 scales only when a
  // tier stores FP8 (no other format reads them).
  bool fp8 = false;
  for (const KvTier& t : spec.tiers) fp8 = fp8 || t.key.dtype == KvDType::kFp8E4M3 || t.value.dtype == KvDType::kFp8E4M3;
  const std::array<float, 2> scale = fp8 ? held_rows_fp8_scales(spec, keys, values) : std::array<float, 2>{0.0f, 0.0f};
  if (!same_tiers(m.tiers, spec.tiers) || m.residual != spec.residual || m.head_dim != d ||
      m.page_tokens != spec.fp8_page_tokens || !same_bits(m.fixed_scale[0], spec.fp8_fixed_scale[0]) ||
      !same_bits(m.fixed_scale[1], spec.fp8_fixed_scale[1]) || !same_bits(m.scale[0], scale[0]) ||
      !same_bits(m.scale[1], scale[1])) {
    m = HeldRowsMemo{};
    m.tiers.assign(spec.tiers.begin(), spec.tiers.end());
    m.residual = spec.residual;
    m.head_dim = d;
    m.page_tokens = spec.fp8_page_tokens;
    m.fixed_scale[0] = spec.fp8_fixed_scale[0];
    m.fixed_scale[1] = spec.fp8_fixed_scale[1];
    m.scale[0] = scale[0];
    m.scale[1] = scale[1];
  }
  const auto positions = static_cast<std::size_t>(last + 1);
  if (m.entries.size() < positions) {
    // Room for the steps to come: each adds a position, and growing by doubling would copy (and
    // fault in) every row again on the second step.
    if (m.entries.capacity() < positions) {
      const std::size_t room = positions + positions / 4 + 64;
      m.entries.reserve(room);
      for (std::vector<float>* rows : {&m.in_k, &m.in_v, &m.out_k, &m.out_v}) rows->reserve(room * ud);
    }
    m.entries.resize(positions);
    m.in_k.resize(positions * ud);
    m.in_v.resize(positions * ud);
    m.out_k.resize(positions * ud);
    m.out_v.resize(positions * ud);
  }
  auto same_inputs = [&](std::int32_t p) {
    const std::size_t at = static_cast<std::size_t>(p) * ud;
    return std::memcmp(m.in_k.data() + at, keys.data() + at, ud * sizeof(float)) == 0 &&
           std::memcmp(m.in_v.data() + at, values.data() + at, ud * sizeof(float)) == 0;
  };
  // Which rows can be reused: all decided before the memo changes.
  std::vector<char> reuse(held.size(), 0);
  for (std::size_t i = 0; i < held.size(); ++i) {
    const HeldToken& t = held[i];
    if (spec.residual && t.tier == 1) continue;
    const HeldRowsMemo::Entry& e = m.entries[static_cast<std::size_t>(t.position)];
    reuse[i] = e.kind == Kind::kSingle && e.tier == t.tier && e.demoted == t.demoted && same_inputs(t.position);
  }
  const auto ug = static_cast<std::size_t>(G);
  for (std::size_t first = 0; first < low.size(); first += ug) {
    const std::uint64_t id = m.entries[static_cast<std::size_t>(held[low[first]].position)].group;
    bool ok = true;
    for (std::size_t j = 0; ok && j < ug; ++j) {
      const HeldToken& t = held[low[first + j]];
      const HeldRowsMemo::Entry& e = m.entries[static_cast<std::size_t>(t.position)];
      ok = e.kind == Kind::kGroup && e.group == id && e.index == static_cast<std::int64_t>(j) && e.tier == t.tier &&
           e.demoted == t.demoted && same_inputs(t.position);
    }
    for (std::size_t j = 0; j < ug; ++j) reuse[low[first + j]] = ok;
  }
  // Every row below is written (reused or fresh), so the buffers are only sized.
  held_keys.resize(held.size() * ud);
  held_values.resize(held_keys.size());
  std::vector<HeldToken> fresh;  // the rest, in held's (ascending) order: whole groups stay whole
  std::vector<std::size_t> fresh_at;
  for (std::size_t i = 0; i < held.size(); ++i) {
    if (reuse[i]) {
      const std::size_t from = static_cast<std::size_t>(held[i].position) * ud;
      std::copy_n(m.out_k.begin() + static_cast<std::ptrdiff_t>(from), d, held_keys.begin() + static_cast<std::ptrdiff_t>(i * ud));
      std::copy_n(m.out_v.begin() + static_cast<std::ptrdiff_t>(from), d, held_values.begin() + static_cast<std::ptrdiff_t>(i * ud));
    } else {
      fresh.push_back(held[i]);
      fresh_at.push_back(i);
    }
  }
  rows_reused_ += static_cast<std::int64_t>(held.size() - fresh.size());
  if (fresh.empty()) return;
  std::vector<float> fk, fv;
  held_rows_ref(spec, keys, values, fresh, fk, fv);
  rows_derived_ += static_cast<std::int64_t>(fresh.size());
  // Group ids for the groups derived now (their tokens are consecutive in `fresh`).
  std::vector<std::uint64_t> group_of(held.size(), 0);
  std::vector<std::int64_t> index_of(held.size(), 0);
  for (std::size_t first = 0; first < low.size(); first += ug) {
    if (reuse[low[first]]) continue;
    const std::uint64_t id = m.next_group++;
    for (std::size_t j = 0; j < ug; ++j) {
      group_of[low[first + j]] = id;
      index_of[low[first + j]] = static_cast<std::int64_t>(j);
    }
  }
  for (std::size_t r = 0; r < fresh.size(); ++r) {
    const std::size_t i = fresh_at[r];
    const HeldToken& t = held[i];
    const std::size_t at = static_cast<std::size_t>(t.position) * ud;
    const auto row = static_cast<std::ptrdiff_t>(r * ud);
    std::copy_n(fk.begin() + row, d, held_keys.begin() + static_cast<std::ptrdiff_t>(i * ud));
    std::copy_n(fv.begin() + row, d, held_values.begin() + static_cast<std::ptrdiff_t>(i * ud));
    std::copy_n(fk.begin() + row, d, m.out_k.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy_n(fv.begin() + row, d, m.out_v.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy_n(keys.begin() + static_cast<std::ptrdiff_t>(at), d, m.in_k.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(at), d, m.in_v.begin() + static_cast<std::ptrdiff_t>(at));
    const bool grouped = spec.residual && t.tier == 1;
    m.entries[static_cast<std::size_t>(t.position)] =
        HeldRowsMemo::Entry{grouped ? Kind::kGroup : Kind::kSingle, t.tier, t.demoted, group_of[i], index_of[i]};
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
