#include "oracles/step_oracle.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "oracles/held_rows_ref.h"
#include "oracles/retained_attention.h"

namespace kvcheck {

std::vector<float> stored_row_ref(const KvFormat& format, std::span<const float> row) {
  if (format.dtype == KvDType::kFp8E4M3) {
    throw std::invalid_argument("stored_row_ref: fp8 needs its head's scale (stored_rows_ref)");
  }
  if (format.dtype == KvDType::kInt && format.spec.granularity == Granularity::kPerChannel) {
    throw std::invalid_argument("stored_row_ref: per-channel keys are stored in groups of tokens (stored_rows_ref)");
  }
  const auto d = static_cast<std::int64_t>(row.size());
  return stored_rows_ref(format, row, 1, d, 0.0f);
}

namespace {

constexpr double kUnit = std::numeric_limits<float>::epsilon() / 2;  // float unit roundoff

// Exact attention (double) of one query head over `n` rows, and the row probabilities.
void attend(const float* q, std::span<const float> keys, std::span<const float> values, std::int64_t n,
            std::int64_t d, double scale, std::vector<double>& probs, std::vector<double>& out) {
  probs.assign(static_cast<std::size_t>(n), 0.0);
  scaled_dots_ref(q, keys.data(), n, d, scale, probs.data());
  double mx = -std::numeric_limits<double>::infinity();
  for (const double p : probs) mx = std::max(mx, p);
  double z = 0.0;
  for (double& p : probs) z += (p = std::exp(p - mx));
  for (double& p : probs) p /= z;
  out.assign(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t c = 0; c < d; ++c) {
      out[static_cast<std::size_t>(c)] += probs[static_cast<std::size_t>(j)] * values[static_cast<std::size_t>(j * d + c)];
    }
  }
}

// Σ_c |q_c k̂_ic| and Σ_c q_c (k_jc - k̂_ic) of the M held tokens i from `first` (j their context
// index), M sums of each in flight, each taken in c order.
template <int M>
void held_sums(const DecodeStepInputs& in, const float* qv, std::int64_t d, std::int64_t first, double (&abs_dot)[M],
               double (&change)[M]) {
  const float* kh[M];
  const float* k[M];
  for (int t = 0; t < M; ++t) {
    kh[t] = in.held_keys.data() + (first + t) * d;
    k[t] = in.keys.data() + static_cast<std::int64_t>(in.held[static_cast<std::size_t>(first + t)]) * d;
    abs_dot[t] = change[t] = 0.0;
  }
  for (std::int64_t c = 0; c < d; ++c) {
    const auto qc = static_cast<double>(qv[c]);
    for (int t = 0; t < M; ++t) {
      const auto khc = static_cast<double>(kh[t][c]);
      abs_dot[t] += std::abs(qc * khc);
      change[t] += qc * (static_cast<double>(k[t][c]) - khc);
    }
  }
}

}  // namespace

DecodeStepCheck check_decode_step(const DecodeStepInputs& in) {
  const std::int64_t d = in.head_dim, g = in.group;
  const auto n = static_cast<std::int64_t>(in.keys.size()) / std::max<std::int64_t>(d, 1);
  const auto h = static_cast<std::int64_t>(in.held.size());
  if (d <= 0 || g <= 0 || in.q.size() != static_cast<std::size_t>(g * d) || in.engine_out.size() != in.q.size() ||
      in.keys.size() != static_cast<std::size_t>(n * d) || in.values.size() != in.keys.size() || h == 0 ||
      in.held_keys.size() != static_cast<std::size_t>(h * d) || in.held_values.size() != in.held_keys.size()) {
    throw std::invalid_argument("check_decode_step: inconsistent sizes");
  }
  for (std::int64_t i = 0; i < h; ++i) {
    const std::int32_t j = in.held[static_cast<std::size_t>(i)];
    if (j < 0 || j >= n || (i > 0 && j <= in.held[static_cast<std::size_t>(i - 1)])) {
      throw std::invalid_argument("check_decode_step: held indices must be ascending context indices");
    }
  }
  // The exact keys and values of the held tokens, for δ and the value error.
  double vmax = 0.0, vhat_max = 0.0, dv_max = 0.0;
  for (std::int64_t j = 0; j < n * d; ++j) vmax = std::max(vmax, std::abs(static_cast<double>(in.values[static_cast<std::size_t>(j)])));
  for (std::int64_t i = 0; i < h; ++i) {
    const std::int64_t j = in.held[static_cast<std::size_t>(i)];
    for (std::int64_t c = 0; c < d; ++c) {
      const double v = in.values[static_cast<std::size_t>(j * d + c)];
      const double vh = in.held_values[static_cast<std::size_t>(i * d + c)];
      vhat_max = std::max(vhat_max, std::abs(vh));
      dv_max = std::max(dv_max, std::abs(v - vh));
    }
  }
  const RetainedAttentionRef held = retained_attention_ref(in.q, in.held_keys, in.held_values, g, d, in.scale);
  DecodeStepCheck r;
  std::vector<double> probs, full;
  for (std::int64_t q = 0; q < g; ++q) {
    const float* qv = in.q.data() + q * d;
    // Float rounding of the engine: each logit's dot product is within γ_d Σ|q_c k̂_c| of exact
    // (γ_d ≈ d·u), so the probabilities within a factor e^{±2ε}; the weighted sum of the values
    // and the normalisation add (held + d)·u relative error.
    double eps = 0.0, delta = 0.0;
    const auto take = [&](double abs_dot, double change) {
      eps = std::max(eps, 1.01 * static_cast<double>(d + 2) * kUnit * abs_dot * in.scale);
      delta = std::max(delta, std::abs(change) * in.scale);
    };
    std::int64_t first = 0;
    for (; first + 4 <= h; first += 4) {
      double abs_dot[4], change[4];
      held_sums<4>(in, qv, d, first, abs_dot, change);
      for (int t = 0; t < 4; ++t) take(abs_dot[t], change[t]);
    }
    for (; first < h; ++first) {
      double abs_dot[1], change[1];
      held_sums<1>(in, qv, d, first, abs_dot, change);
      take(abs_dot[0], change[0]);
    }
    const double tol =
        (std::expm1(2 * eps) + 2.0 * static_cast<double>(h + d + 4) * kUnit) * vhat_max + in.output_rounding + 1e-30;
    attend(qv, in.keys, in.values, n, d, in.scale, probs, full);
    double pruned = 1.0;
    for (std::int64_t i = 0; i < h; ++i) pruned -= probs[static_cast<std::size_t>(in.held[static_cast<std::size_t>(i)])];
    pruned = std::max(pruned, 0.0);
    // Logits moved by at most δ move the held distribution by at most tanh(δ/2) in total
    // variation (the worst: +δ on a set of mass 1/(1 + e^δ), -δ on the rest), and the output by
    // at most that times the spread of the values, 2·max|v̂|. The original spec's ‖p̂ - p‖₁·max|v̂| with
    // ‖p̂ - p‖₁ <= e^{2δ} - 1 is twice this or more; the tight form is what a tightness property
    // (StepOracleTightnessProps.LogitChangeTermIsReached) can hold to within 10%.
    const double quant = 2.0 * std::tanh(delta / 2.0) * vhat_max + dv_max;
    const double prune = 2.0 * pruned * vmax;
    r.held_tolerance = std::max(r.held_tolerance, tol);
    r.delta = std::max(r.delta, delta);
    r.pruned_mass = std::max(r.pruned_mass, pruned);
    r.quant_bound = std::max(r.quant_bound, quant);
    r.prune_bound = std::max(r.prune_bound, prune);
    double held_error = 0.0, full_error = 0.0;
    for (std::int64_t c = 0; c < d; ++c) {
      const double e = in.engine_out[static_cast<std::size_t>(q * d + c)];
      // `!(a <= b)` rather than std::max, so that a NaN output propagates instead of vanishing.
      const double he = std::abs(e - held.out[static_cast<std::size_t>(q * d + c)]);
      const double fe = std::abs(e - full[static_cast<std::size_t>(c)]);
      if (!(he <= held_error)) held_error = he;
      if (!(fe <= full_error)) full_error = fe;
    }
    // Each query head against its own bounds.
    r.held_violated = r.held_violated || !(held_error <= tol);
    r.full_violated = r.full_violated || !(full_error <= quant + prune + tol);
    if (!(held_error <= r.held_error)) r.held_error = held_error;
    if (!(full_error <= r.full_error)) r.full_error = full_error;
    r.full_bound = std::max(r.full_bound, quant + prune + tol);
  }
  return r;
}

std::string DecodeStepCheck::describe() const {
  return fmt::format("held error {:.3e} (tolerance {:.3e}); full error {:.3e} (bound {:.3e} = quantization {:.3e} "
                     "[delta {:.3e}] + pruning {:.3e} [mass {:.3e}] + rounding)",
                     held_error, held_tolerance, full_error, full_bound, quant_bound, delta, prune_bound,
                     pruned_mass);
}

}  // namespace kvcheck
