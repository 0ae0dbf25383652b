// The per-step oracle's checks on hand-computed cases: what it accepts, what it flags, and the
// bound's parts.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "oracles/step_oracle.h"

namespace kvcheck {
namespace {

// One query head, head_dim 1, scale 1: q = 1, so a key is its own logit.
DecodeStepInputs one_dim(const std::vector<float>& q, const std::vector<float>& out, const std::vector<float>& k,
                         const std::vector<float>& v, const std::vector<std::int32_t>& held,
                         const std::vector<float>& hk, const std::vector<float>& hv) {
  DecodeStepInputs in;
  in.group = static_cast<std::int64_t>(q.size());
  in.head_dim = 1;
  in.scale = 1.0;
  in.q = q;
  in.engine_out = out;
  in.keys = k;
  in.values = v;
  in.held = held;
  in.held_keys = hk;
  in.held_values = hv;
  return in;
}

TEST(StepOracle, AcceptsExactAttentionAndFlagsAWrongOutput) {
  // Two tokens with equal logits: exact output (0 + 1) / 2.
  const std::vector<float> q = {1}, k = {0, 0}, v = {0, 1};
  const std::vector<std::int32_t> all = {0, 1};
  const DecodeStepCheck ok = check_decode_step(one_dim(q, {0.5f}, k, v, all, k, v));
  EXPECT_TRUE(ok.ok()) << ok.describe();
  EXPECT_EQ(ok.held_error, 0.0);
  EXPECT_NEAR(ok.pruned_mass, 0.0, 1e-15);
  const DecodeStepCheck bad = check_decode_step(one_dim(q, {0.501f}, k, v, all, k, v));
  EXPECT_TRUE(bad.held_violated) << bad.describe();
  EXPECT_NEAR(bad.held_error, 0.001, 1e-6);
  const std::vector<float> nan = {std::nanf("")};
  EXPECT_FALSE(check_decode_step(one_dim(q, nan, k, v, all, k, v)).ok());
}

TEST(StepOracle, PruningIsBoundedByTwiceThePrunedMass) {
  // Holding token 0 only: exact over the held set is 0, over the context 0.5; mass 0.5 pruned,
  // bound 2 * 0.5 * max|v| = 1.
  const std::vector<float> q = {1}, k = {0, 0}, v = {0, 1};
  const DecodeStepCheck r = check_decode_step(one_dim(q, {0.0f}, k, v, {0}, {0}, {0}));
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_NEAR(r.pruned_mass, 0.5, 1e-12);
  EXPECT_NEAR(r.prune_bound, 1.0, 1e-12);
  EXPECT_NEAR(r.full_error, 0.5, 1e-12);
  // The engine attending to token 1 instead, while the policy claims token 0: flagged.
  EXPECT_TRUE(check_decode_step(one_dim(q, {1.0f}, k, v, {0}, {0}, {0})).held_violated);
}

TEST(StepOracle, QuantizationBoundUsesTheLogitChangeAndTheValueError) {
  // Keys 0 and 1 stored as 0 and 0.75: delta = 0.25. Values 1 and -1 stored as 1 and -0.5.
  const std::vector<float> q = {1}, k = {0, 1}, v = {1, -1}, hk = {0, 0.75f}, hv = {1, -0.5f};
  const std::vector<std::int32_t> all = {0, 1};
  const double p1 = 1.0 / (1.0 + std::exp(-0.75));  // the held set's weight on token 1
  const auto out = static_cast<float>((1 - p1) * 1 + p1 * -0.5);
  const DecodeStepCheck r = check_decode_step(one_dim(q, {out}, k, v, all, hk, hv));
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_NEAR(r.delta, 0.25, 1e-12);
  EXPECT_NEAR(r.quant_bound, 2.0 * std::tanh(0.125) * 1.0 + 0.5, 1e-12);
  EXPECT_LE(r.full_error, r.quant_bound);
}

TEST(StepOracle, EachQueryHeadIsHeldToItsOwnTolerance) {
  // Group of two: head 0 exact, head 1 off. The maxima alone would not say which.
  const std::vector<float> q = {1, 1}, k = {0, 0}, v = {0, 1};
  const DecodeStepCheck r = check_decode_step(one_dim(q, {0.5f, 0.6f}, k, v, {0, 1}, k, v));
  EXPECT_TRUE(r.held_violated);
}

TEST(StepOracle, RejectsInconsistentInputs) {
  const std::vector<float> q = {1}, k = {0, 0}, v = {0, 1};
  EXPECT_THROW(check_decode_step(one_dim(q, {0.5f}, k, v, {}, {}, {})), std::invalid_argument);
  EXPECT_THROW(check_decode_step(one_dim(q, {0.5f}, k, v, {1, 0}, k, v)), std::invalid_argument);
  EXPECT_THROW(check_decode_step(one_dim(q, {0.5f}, k, v, {0, 2}, k, v)), std::invalid_argument);
}

TEST(StepOracle, StoredRowsAreDequantizedAsTheirFormatStoresThem) {
  const std::vector<float> row = {1.0f, 1.0f / 3.0f, -2.5f, 1000.1f};
  EXPECT_EQ(stored_row_ref(fp32_format(), row), row);
  const std::vector<float> h = stored_row_ref(fp16_format(), row);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], 0.333251953125f);  // nearest fp16 to 1/3
  EXPECT_EQ(h[3], 1000.0f);          // fp16 spacing is 0.5 at 1000
}

}  // namespace
}  // namespace kvcheck
