// Tightness of the per-step oracle's bound (oracles/step_oracle.h): constructed decode steps on
// which each term of the full-context bound is nearly attained on its own, by an engine that is
// exact over the tokens it holds. Each case asserts the oracle accepts the step and that the
// distance to full attention uses at least kTight of the term under test:
//   value error    stored values off by +E in one channel, keys exact: error E = max|v - v̂|;
//   logit change   keys moved by +δ on a set A of mass 1/(1 + e^δ) and by -δ on the rest, values
//                  +V on A and -V elsewhere: the held distribution moves A's mass to e^δ/(1 + e^δ)
//                  and the output by 2V·tanh(δ/2), the largest any logit change of at most δ can
//                  cause (the bound's 2·tanh(δ/2)·max|v̂|);
//   pruning        values +V on the held tokens, -V on the pruned ones of mass m: error 2mV.
// A term made looser by 1/kTight ≈ 1.11 or more fails here.
//   RC_PARAMS="seed=7 max_success=10000" build/properties/kvcheck_property_tests --gtest_filter='StepOracleTightnessProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "oracles/retained_attention.h"
#include "oracles/step_oracle.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

constexpr double kTight = 0.9;
constexpr int kGateCases = 300;

// A decode step of one query head: q, exact and stored rows, the held list, and the output of an
// engine that is exact over the held rows (double, rounded to float once).
struct Step {
  std::int64_t d = 0;
  double scale = 1.0;
  std::vector<float> q, keys, values, held_keys, held_values, out;
  std::vector<std::int32_t> held;

  DecodeStepCheck check() {
    out.clear();
    for (const double o : retained_attention_ref(q, held_keys, held_values, 1, d, scale).out) {
      out.push_back(static_cast<float>(o));
    }
    DecodeStepInputs in;
    in.group = 1;
    in.head_dim = d;
    in.scale = scale;
    in.q = q;
    in.engine_out = out;
    in.keys = keys;
    in.values = values;
    in.held = held;
    in.held_keys = held_keys;
    in.held_values = held_values;
    return check_decode_step(in);
  }
};

// q of d channels, and the key that gives logit x: x·q / (|q|²·scale), collinear with q.
struct Query {
  std::int64_t d = 0;
  double scale = 0.0;
  std::vector<float> q;
  double norm2 = 0.0;
  void key(double x, std::vector<float>& into) const {
    for (std::int64_t c = 0; c < d; ++c) into.push_back(static_cast<float>(x * q[c] / (norm2 * scale)));
  }
};

Query draw_query() {
  Query g;
  g.d = *rc::gen::inRange<std::int64_t>(1, 17);
  g.scale = 1.0 / std::sqrt(static_cast<double>(g.d));
  for (std::int64_t c = 0; c < g.d; ++c) {
    g.q.push_back(static_cast<float>(*rc::gen::inRange(-1000, 1001)) / 500.0f);
    g.norm2 += static_cast<double>(g.q.back()) * g.q.back();
  }
  RC_PRE(g.norm2 > 0.01);
  return g;
}

// A value row: `first` in channel c0, the others anywhere in [-V, V].
void value_row(std::int64_t d, std::int64_t c0, float first, float v_max, std::vector<float>& into) {
  for (std::int64_t c = 0; c < d; ++c) {
    into.push_back(c == c0 ? first : v_max * static_cast<float>(*rc::gen::inRange(-1000, 1001)) / 1000.0f);
  }
}

Step start(const Query& g) {
  Step s;
  s.d = g.d;
  s.scale = g.scale;
  s.q = g.q;
  return s;
}

TEST(StepOracleTightnessProps, ValueErrorTermIsReached) {
  double least = 1.0;
  testing::check_property("value term reached", kGateCases, [&least] {
    const Query g = draw_query();
    Step s = start(g);
    const auto n = *rc::gen::inRange(1, 13);
    const std::int64_t c0 = *rc::gen::inRange<std::int64_t>(0, g.d);
    const float v_max = std::ldexp(1.0f, *rc::gen::inRange(-8, 9));
    const float e = v_max * static_cast<float>(*rc::gen::inRange(1, 501)) / 1000.0f;  // E in (0, V/2]
    for (int j = 0; j < n; ++j) {
      g.key(static_cast<double>(*rc::gen::inRange(-3000, 3001)) / 1000.0, s.keys);
      value_row(g.d, c0, v_max * static_cast<float>(*rc::gen::inRange(-500, 501)) / 1000.0f, v_max, s.values);
      s.held.push_back(j);
    }
    s.held_keys = s.keys;
    s.held_values = s.values;
    for (int j = 0; j < n; ++j) s.held_values[static_cast<std::size_t>(j * g.d + c0)] += e;
    const DecodeStepCheck r = s.check();
    RC_ASSERT(r.ok());
    RC_ASSERT(r.delta == 0.0);
    least = std::min(least, r.full_error / r.quant_bound);
    RC_ASSERT(r.full_error >= kTight * r.quant_bound);
  });
  RecordProperty("least_bound_use", std::to_string(least));
}

TEST(StepOracleTightnessProps, LogitChangeTermIsReached) {
  double least = 1.0;
  testing::check_property("logit-change term reached", kGateCases, [&least] {
    const Query g = draw_query();
    Step s = start(g);
    const auto n_a = *rc::gen::inRange(1, 7), n_b = *rc::gen::inRange(1, 7);
    const double delta = static_cast<double>(*rc::gen::inRange(10, 2001)) / 1000.0;  // 0.01 .. 2
    const double base = static_cast<double>(*rc::gen::inRange(-2000, 2001)) / 1000.0;
    // Exact logits: A at base - δ + log(n_B / n_A), B at base, so that A's mass is 1 / (1 + e^δ);
    // stored: A moved up by δ, B down by δ.
    const double x_a = base - delta + std::log(static_cast<double>(n_b) / n_a), x_b = base;
    const std::int64_t c0 = *rc::gen::inRange<std::int64_t>(0, g.d);
    const float v_max = std::ldexp(1.0f, *rc::gen::inRange(-8, 9));
    for (int j = 0; j < n_a + n_b; ++j) {
      const bool in_a = j < n_a;
      g.key(in_a ? x_a : x_b, s.keys);
      g.key(in_a ? x_a + delta : x_b - delta, s.held_keys);
      value_row(g.d, c0, in_a ? v_max : -v_max, v_max, s.values);
      s.held.push_back(j);
    }
    s.held_values = s.values;
    const DecodeStepCheck r = s.check();
    RC_ASSERT(r.ok());
    RC_ASSERT(std::fabs(r.delta - delta) <= 1e-5 * (1.0 + delta));
    least = std::min(least, r.full_error / r.quant_bound);
    RC_ASSERT(r.full_error >= kTight * r.quant_bound);
  });
  RecordProperty("least_bound_use", std::to_string(least));
}

TEST(StepOracleTightnessProps, PruningTermIsReached) {
  double least = 1.0;
  testing::check_property("pruning term reached", kGateCases, [&least] {
    const Query g = draw_query();
    Step s = start(g);
    const auto n = *rc::gen::inRange(2, 13);
    const std::int64_t c0 = *rc::gen::inRange<std::int64_t>(0, g.d);
    const float v_max = std::ldexp(1.0f, *rc::gen::inRange(-8, 9));
    // Each token held or pruned at random (at least one of each): held +V in channel c0.
    std::vector<bool> keep(static_cast<std::size_t>(n));
    for (auto&& k : keep) k = *rc::gen::inRange(0, 2) == 1;
    keep[0] = true;
    keep[1] = false;
    for (int j = 0; j < n; ++j) {
      g.key(static_cast<double>(*rc::gen::inRange(-3000, 3001)) / 1000.0, s.keys);
      value_row(g.d, c0, keep[static_cast<std::size_t>(j)] ? v_max : -v_max, v_max, s.values);
      if (!keep[static_cast<std::size_t>(j)]) continue;
      s.held.push_back(j);
      s.held_keys.insert(s.held_keys.end(), s.keys.end() - g.d, s.keys.end());
      s.held_values.insert(s.held_values.end(), s.values.end() - g.d, s.values.end());
    }
    const DecodeStepCheck r = s.check();
    RC_PRE(r.pruned_mass > 1e-3);  // a pruned mass below the float tolerance's scale says nothing
    RC_ASSERT(r.ok());
    RC_ASSERT(r.quant_bound == 0.0);
    least = std::min(least, r.full_error / r.prune_bound);
    RC_ASSERT(r.full_error >= kTight * r.prune_bound);
  });
  RecordProperty("least_bound_use", std::to_string(least));
}

}  // namespace
}  // namespace kvcheck
