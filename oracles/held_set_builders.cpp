#include "oracles/held_set_builders.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/hadamard_rotate.h"
#include "oracles/hadamard_ref.h"
#include "oracles/page_selection_ref.h"

namespace kvcheck {

void DerivedRowsMemo::map(std::vector<float>& rows, std::int64_t width,
                          const std::function<void(std::vector<float>& rows)>& derive) {
  const auto w = static_cast<std::size_t>(width);
  const std::size_t n = w == 0 ? 0 : rows.size() / w;
  if (width_ != width) {
    width_ = width;
    valid_.clear();
    in_.clear();
    out_.clear();
  }
  if (valid_.size() < n) {
    if (valid_.capacity() < n) {  // room for the steps to come, one row each
      const std::size_t room = n + n / 4 + 64;
      valid_.reserve(room);
      in_.reserve(room * w);
      out_.reserve(room * w);
    }
    valid_.resize(n, 0);
    in_.resize(n * w);
    out_.resize(n * w);
  }
  std::vector<std::size_t> fresh;
  for (std::size_t r = 0; r < n; ++r) {
    if (!valid_[r] || std::memcmp(in_.data() + r * w, rows.data() + r * w, w * sizeof(float)) != 0) fresh.push_back(r);
  }
  if (!fresh.empty()) {
    std::vector<float> block(fresh.size() * w);
    for (std::size_t i = 0; i < fresh.size(); ++i) std::copy_n(rows.data() + fresh[i] * w, w, block.data() + i * w);
    derive(block);
    for (std::size_t i = 0; i < fresh.size(); ++i) {
      std::copy_n(rows.data() + fresh[i] * w, w, in_.data() + fresh[i] * w);
      std::copy_n(block.data() + i * w, w, out_.data() + fresh[i] * w);
      valid_[fresh[i]] = 1;
    }
  }
  std::copy_n(out_.data(), n * w, rows.data());
}

namespace {

// ---- FP8 scales ------------------------------------------------------------------------------

bool fp8_applies(const KvPolicy& policy) {
  return policy.fp8_scale() == Fp8Scale::kCalibrated || policy.fp8_scale() == Fp8Scale::kPage;
}

// A calibrated head's fixed scales; fp8:scale=page encodes tier 1 a residual's page at a time.
void fp8_before_rows(Engine& engine, const DecodeHeadTrace& s, HeldSet& h) {
  const KvPolicy& policy = engine.cache->policy();
  if (policy.fp8_scale() == Fp8Scale::kCalibrated) {
    for (int part = 0; part < 2; ++part) h.spec.fp8_fixed_scale[part] = policy.fp8_fixed_scale(s.layer, s.kv_head, part);
  }
  if (policy.fp8_scale() == Fp8Scale::kPage) h.spec.fp8_page_tokens = policy.residual_tokens();
}

// ---- Hadamard rotation -----------------------------------------------------------------------

bool rotation_applies(const KvPolicy& policy) { return policy.rotation().hadamard; }

// The check runs in the policy's space (R = H·D/√d). The cache quantized the rows the runner's
// float rotation made, so the held rows are quantized from that same rotation
// (kernels/cpu/hadamard_rotate.h, itself held to the dense matrix); the exact rows and the
// engine's output (rotated back by the runner) go through the dense double matrix.
void rotation_before_rows(Engine& engine, const DecodeHeadTrace& s, HeldSet& h) {
  const KvRotation rotation = engine.cache->policy().rotation();
  const std::int64_t d = h.spec.head_dim;
  const std::vector<float> signs = rotation.signs ? hadamard_signs(rotation.seed, d) : std::vector<float>{};
  h.stored_keys = h.keys;
  h.stored_values = h.values;
  hadamard_rotate(h.stored_keys, d, signs);
  hadamard_rotate(h.stored_values, d, signs);
  hadamard_rotate(h.q, d, signs);
  auto exact = [&](std::span<const float> rows, std::vector<float>& to) {
    const std::vector<double> r = hadamard_rotate_ref(rows, d, signs);
    to.assign(r.begin(), r.end());
  };
  const auto exact_in_place = [&](std::vector<float>& rows) { exact(std::vector<float>(rows), rows); };
  for (const auto& [rows, memo] : {std::pair{&h.keys, h.derived_keys}, std::pair{&h.values, h.derived_values}}) {
    if (memo) memo->map(*rows, d, exact_in_place);
    else exact_in_place(*rows);
  }
  exact(s.out, h.out);
}

// The runner's R^T and the R here: (log2 d + 2)·u·‖o'‖₂ each way (hadamard_rotate_props), and
// ‖o'‖₂ <= max ‖v̂‖₂ for a convex mixture of the held values.
void rotation_after_rows(Engine&, const DecodeHeadTrace&, HeldSet& h) {
  const std::int64_t d = h.spec.head_dim;
  double vhat_norm = 0.0;
  for (std::size_t i = 0; i < h.held.size(); ++i) {
    double n2 = 0.0;
    for (std::int64_t c2 = 0; c2 < d; ++c2) {
      n2 += std::pow(h.held_values[i * static_cast<std::size_t>(d) + static_cast<std::size_t>(c2)], 2);
    }
    vhat_norm = std::max(vhat_norm, std::sqrt(n2));
  }
  h.output_rounding =
      2.02 * (std::log2(static_cast<double>(d)) + 2.0) * (std::numeric_limits<float>::epsilon() / 2) * vhat_norm;
}

// ---- page selection (Quest) ------------------------------------------------------------------

bool selection_applies(const KvPolicy& policy) { return policy.selects_pages(); }

// oracles/page_selection_ref.h: the bound on every page and the choice checked, then the output
// held to exactly the read pages' tokens (the others count as pruned, with their exact mass).
// The violation, or empty.
std::string check_selected_pages(Engine& engine, const DecodeHeadTrace& s, HeldSet& h) {
  const ModelConfig& c = engine.weights.config;
  const auto d = static_cast<std::size_t>(c.head_dim);
  const PageTable& table = engine.cache->manager().table(s.request, s.layer, s.kv_head);
  const std::int64_t high_pages = table.count(kHighTier);
  std::vector<std::size_t> page_of;
  for (std::size_t i : h.order) {
    page_of.push_back(static_cast<std::size_t>(h.slots[i].page_index + (h.slots[i].tier == kHighTier ? 0 : high_pages)));
  }
  PageSelectionInputs in;
  in.group = c.group_size();
  in.head_dim = c.head_dim;
  in.q = s.q;
  in.keys = h.held_keys;
  in.page_of = page_of;
  in.pages = high_pages + table.count(kLowTier);
  in.read = s.pages_read;
  // The page being written: the one holding the step's own token.
  const auto self = std::find(h.held.begin(), h.held.end(), s.position);
  if (self == h.held.end()) return fmt::format("the step's token (position {}) is not held", s.position);
  in.written = page_of[static_cast<std::size_t>(self - h.held.begin())];
  in.k = engine.cache->policy().selected_pages();
  // The bounds from the key ranges the pages store, as the engine read them to choose.
  std::vector<PageRead> pages;
  engine.cache->head_pages(s.request, s.layer, s.kv_head, pages);
  std::vector<float> key_min(pages.size() * d), key_max(key_min.size());
  for (std::size_t p = 0; p < pages.size(); ++p) {
    read_page_key_range(engine.cache->tiers()[static_cast<std::size_t>(pages[p].tier)].layout, pages[p].bytes,
                        std::span<float>(key_min).subspan(p * d, d), std::span<float>(key_max).subspan(p * d, d));
  }
  in.key_min = key_min;
  in.key_max = key_max;
  std::string violation = check_page_selection(in);
  // Only the read pages' tokens are held for this step's output.
  std::vector<std::int32_t> read_positions;
  std::vector<float> read_keys, read_values;
  for (std::size_t j = 0; j < h.held.size(); ++j) {
    if (!std::binary_search(s.pages_read.begin(), s.pages_read.end(), page_of[j])) continue;
    read_positions.push_back(h.held[j]);
    read_keys.insert(read_keys.end(), h.held_keys.begin() + static_cast<std::ptrdiff_t>(j * d),
                     h.held_keys.begin() + static_cast<std::ptrdiff_t>((j + 1) * d));
    read_values.insert(read_values.end(), h.held_values.begin() + static_cast<std::ptrdiff_t>(j * d),
                       h.held_values.begin() + static_cast<std::ptrdiff_t>((j + 1) * d));
  }
  if (read_positions.empty()) return violation.empty() ? "no page read" : violation;
  h.held.swap(read_positions);
  h.held_keys.swap(read_keys);
  h.held_values.swap(read_values);
  return violation;
}

void selection_after_rows(Engine& engine, const DecodeHeadTrace& s, HeldSet& h) {
  h.selection_violation = check_selected_pages(engine, s, h);
}

constexpr HeldSetBuilder kBuilders[] = {
    {"fp8 scale", fp8_applies, fp8_before_rows, nullptr},
    {"rotation", rotation_applies, rotation_before_rows, rotation_after_rows},
    {"page selection", selection_applies, nullptr, selection_after_rows},
};

}  // namespace

std::span<const HeldSetBuilder> held_set_builders() { return kBuilders; }

}  // namespace kvcheck
