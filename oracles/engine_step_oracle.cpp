#include "oracles/engine_step_oracle.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "kernels/cpu/hadamard_rotate.h"
#include "oracles/hadamard_ref.h"
#include "oracles/held_rows_ref.h"
#include "oracles/page_selection_ref.h"

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
  // Exact rows of this head over the context, and the held ones as their tier stores them.
  std::vector<float> keys(static_cast<std::size_t>(context * d)), values(keys.size());
  const std::vector<float>& ks = keys_.at(static_cast<std::size_t>(s.layer));
  const std::vector<float>& vs = values_.at(static_cast<std::size_t>(s.layer));
  for (std::int64_t j = 0; j < context; ++j) {
    const std::size_t from = static_cast<std::size_t>(j) * kv_dim + static_cast<std::size_t>(s.kv_head * d);
    std::copy_n(ks.begin() + static_cast<std::ptrdiff_t>(from), d, keys.begin() + j * d);
    std::copy_n(vs.begin() + static_cast<std::ptrdiff_t>(from), d, values.begin() + j * d);
  }
  std::vector<std::size_t> order(live.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return live[a].position < live[b].position; });
  std::vector<std::int32_t> held;
  std::vector<HeldToken> tokens;
  for (std::size_t i : order) {
    const std::int32_t j = live[i].position;
    held.push_back(j);
    tokens.push_back(HeldToken{j, slots[i].tier, slots[i].tier == kLowTier && demoted_.contains({s.layer, s.kv_head, j})});
  }
  std::vector<KvTier> tiers;
  for (const TierRead& t : engine_.cache->tiers()) tiers.push_back(t.tier);
  std::vector<float> held_keys, held_values;
  const KvPolicy& policy = engine_.cache->policy();
  HeldRowsSpec spec{tiers, policy.residual_tokens() > 0, prompt_len_, d};
  if (policy.fp8_scale() == Fp8Scale::kCalibrated) {
    for (int part = 0; part < 2; ++part) spec.fp8_fixed_scale[part] = policy.fp8_fixed_scale(s.layer, s.kv_head, part);
  }
  if (policy.fp8_scale() == Fp8Scale::kPage) spec.fp8_page_tokens = policy.residual_tokens();
  // A rotating policy: the check runs in its space (R = H·D/√d). The cache quantized the rows the
  // runner's float rotation made, so the held rows are quantized from that same rotation
  // (kernels/cpu/hadamard_rotate.h, itself held to the dense matrix); the exact rows and the
  // engine's output (rotated back by the runner) go through the dense double matrix.
  const KvRotation rotation = policy.rotation();
  std::vector<float> q(s.q.begin(), s.q.end()), out(s.out.begin(), s.out.end());
  double output_rounding = 0.0;
  if (rotation.hadamard) {
    const std::vector<float> signs = rotation.signs ? hadamard_signs(rotation.seed, d) : std::vector<float>{};
    std::vector<float> stored_keys = keys, stored_values = values;
    hadamard_rotate(stored_keys, d, signs);
    hadamard_rotate(stored_values, d, signs);
    hadamard_rotate(q, d, signs);
    auto exact = [&](std::span<const float> rows, std::vector<float>& to) {
      const std::vector<double> r = hadamard_rotate_ref(rows, d, signs);
      to.assign(r.begin(), r.end());
    };
    exact(std::vector<float>(keys), keys);
    exact(std::vector<float>(values), values);
    exact(s.out, out);
    held_rows_ref(spec, stored_keys, stored_values, tokens, held_keys, held_values);
    // The runner's R^T and the R here: (log2 d + 2)·u·‖o'‖₂ each way (hadamard_rotate_props), and
    // ‖o'‖₂ <= max ‖v̂‖₂ for a convex mixture of the held values.
    double vhat_norm = 0.0;
    for (std::size_t i = 0; i < held.size(); ++i) {
      double n2 = 0.0;
      for (std::int64_t c2 = 0; c2 < d; ++c2) n2 += std::pow(held_values[i * static_cast<std::size_t>(d) + static_cast<std::size_t>(c2)], 2);
      vhat_norm = std::max(vhat_norm, std::sqrt(n2));
    }
    output_rounding = 2.02 * (std::log2(static_cast<double>(d)) + 2.0) * (std::numeric_limits<float>::epsilon() / 2) * vhat_norm;
  } else {
    held_rows_ref(spec, keys, values, tokens, held_keys, held_values);
  }
  // A page-selecting policy (Quest): the choice checked on every page, then the output held to
  // exactly the read pages' tokens (the others count as pruned, with their exact mass).
  std::string selection_violation;
  if (policy.selects_pages()) {
    selection_violation = check_selected_pages(s, slots, order, held, held_keys, held_values);
  }
  DecodeStepInputs in;
  in.group = c.group_size();
  in.head_dim = d;
  in.scale = 1.0 / std::sqrt(static_cast<double>(d));
  in.q = q;
  in.engine_out = out;
  in.output_rounding = output_rounding;
  in.keys = keys;
  in.values = values;
  in.held = held;
  in.held_keys = held_keys;
  in.held_values = held_values;
  const DecodeStepCheck r = check_decode_step(in);
  ++checks_;
  held_error_max_ = std::max(held_error_max_, r.held_error);
  full_error_max_ = std::max(full_error_max_, r.full_error);
  pruned_mass_max_ = std::max(pruned_mass_max_, r.pruned_mass);
  delta_max_ = std::max(delta_max_, r.delta);
  if (r.full_bound > 0) bound_use_max_ = std::max(bound_use_max_, r.full_error / r.full_bound);
  if (observe_) observe_(EngineStepHead{s, live, slots, r});
  if (!selection_violation.empty()) {
    ++selection_violations_;
    if (static_cast<std::int64_t>(reports_.size()) < max_reports_) {
      reports_.push_back(fmt::format("oracle violation: {}, position {}, layer {}, kv head {}: page selection: {}", label_,
                                     s.position, s.layer, s.kv_head, selection_violation));
    }
  }
  if (r.ok()) return;
  held_violations_ += r.held_violated ? 1 : 0;
  full_violations_ += r.full_violated ? 1 : 0;
  if (static_cast<std::int64_t>(reports_.size()) < max_reports_) {
    reports_.push_back(fmt::format("oracle violation: {}, position {}, layer {}, kv head {}, {} tokens held of {}: {}",
                                   label_, s.position, s.layer, s.kv_head, held.size(), context, r.describe()));
  }
}

std::string EngineStepOracle::check_selected_pages(const DecodeHeadTrace& s, std::span<const SlotRef> slots,
                                                   std::span<const std::size_t> order, std::vector<std::int32_t>& held,
                                                   std::vector<float>& held_keys, std::vector<float>& held_values) const {
  const ModelConfig& c = engine_.weights.config;
  const auto d = static_cast<std::size_t>(c.head_dim);
  const PageTable& table = engine_.cache->manager().table(s.request, s.layer, s.kv_head);
  const std::int64_t high_pages = table.count(kHighTier);
  std::vector<std::size_t> page_of;
  for (std::size_t i : order) {
    page_of.push_back(static_cast<std::size_t>(slots[i].page_index + (slots[i].tier == kHighTier ? 0 : high_pages)));
  }
  PageSelectionInputs in;
  in.group = c.group_size();
  in.head_dim = c.head_dim;
  in.q = s.q;
  in.keys = held_keys;
  in.page_of = page_of;
  in.pages = high_pages + table.count(kLowTier);
  in.read = s.pages_read;
  // The page being written: the one holding the step's own token.
  const auto self = std::find(held.begin(), held.end(), s.position);
  if (self == held.end()) return fmt::format("the step's token (position {}) is not held", s.position);
  in.written = page_of[static_cast<std::size_t>(self - held.begin())];
  in.k = engine_.cache->policy().selected_pages();
  // The bounds from the key ranges the pages store, as the engine read them to choose.
  std::vector<PageRead> pages;
  engine_.cache->head_pages(s.request, s.layer, s.kv_head, pages);
  std::vector<float> key_min(pages.size() * d), key_max(key_min.size());
  for (std::size_t p = 0; p < pages.size(); ++p) {
    read_page_key_range(engine_.cache->tiers()[static_cast<std::size_t>(pages[p].tier)].layout, pages[p].bytes,
                        std::span<float>(key_min).subspan(p * d, d), std::span<float>(key_max).subspan(p * d, d));
  }
  in.key_min = key_min;
  in.key_max = key_max;
  std::string violation = check_page_selection(in);
  // Only the read pages' tokens are held for this step's output.
  std::vector<std::int32_t> read_positions;
  std::vector<float> read_keys, read_values;
  for (std::size_t j = 0; j < held.size(); ++j) {
    if (!std::binary_search(s.pages_read.begin(), s.pages_read.end(), page_of[j])) continue;
    read_positions.push_back(held[j]);
    read_keys.insert(read_keys.end(), held_keys.begin() + static_cast<std::ptrdiff_t>(j * d),
                     held_keys.begin() + static_cast<std::ptrdiff_t>((j + 1) * d));
    read_values.insert(read_values.end(), held_values.begin() + static_cast<std::ptrdiff_t>(j * d),
                       held_values.begin() + static_cast<std::ptrdiff_t>((j + 1) * d));
  }
  if (read_positions.empty()) return violation.empty() ? "no page read" : violation;
  held.swap(read_positions);
  held_keys.swap(read_keys);
  held_values.swap(read_values);
  return violation;
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
