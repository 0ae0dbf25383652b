// The decode step's roofline (bench/step_roofline.h) against numbers counted by hand for the
// tiny shape: 2 layers, hidden 32, 4 heads / 2 kv heads of 8, MLP 48, vocabulary 40, untied.
//   per layer  q 32x32 + k 16x32 + v 16x32 + o 32x32 + gate, up, down 3 x 48x32 = 7,680 weights
//   model      2 x 7,680 + lm_head 40x32 = 16,640 weights (the embedding is not read by a step)
#include <gtest/gtest.h>

#include "bench/step_roofline.h"
#include "optimized/engine_weights.h"
#include "properties/support/model_fixtures.h"

namespace kvcheck {
namespace {

constexpr double kWeights = 16640.0;

TEST(StepRoofline, WeightBytesAreTheProjectionsAndTheHeadAsStored) {
  const ModelConfig c = testing::tiny_config();
  EXPECT_EQ(decode_weight_bytes(load_engine_weights(testing::tiny_model(c, 1, DType::kBF16))), 2 * 16640);
  EXPECT_EQ(decode_weight_bytes(load_engine_weights(testing::tiny_model(c, 1, DType::kF32))), 4 * 16640);
}

TEST(StepRoofline, WorkCountsTwoFlopsPerWeightPerRowAndFourPerHeadDimPerQuerySlot) {
  const ModelConfig c = testing::tiny_config();
  // Batch 3 over 100 stored slots (all requests, layers and kv heads) of 5,000 bytes.
  const DecodeStepWork w = decode_step_work(c, 33280, 3.0, 100.0, 5000.0);
  EXPECT_DOUBLE_EQ(w.weight_bytes, 33280.0);
  EXPECT_DOUBLE_EQ(w.kv_bytes, 5000.0);
  EXPECT_DOUBLE_EQ(w.bytes(), 38280.0);
  // 2 x 16,640 x 3 = 99,840; attention 4 x head_dim 8 x group 2 x 100 slots = 6,400.
  EXPECT_DOUBLE_EQ(w.flops, 2.0 * kWeights * 3.0 + 6400.0);
  EXPECT_DOUBLE_EQ(w.flops, 106240.0);
}

TEST(StepRoofline, ThePredictionIsTheLargerOfTheTwoTimes) {
  const ModelConfig c = testing::tiny_config();
  // 1 MB/s and 10 MFLOP/s: batch 3 reads 38,280 bytes (38.28 ms) and computes 106,240 FLOPs
  // (10.624 ms): bandwidth-bound.
  const Roofline small = roofline(decode_step_work(c, 33280, 3.0, 100.0, 5000.0), 1e6, 1e7);
  EXPECT_DOUBLE_EQ(small.bandwidth_s, 0.03828);
  EXPECT_DOUBLE_EQ(small.compute_s, 0.010624);
  EXPECT_DOUBLE_EQ(small.predicted_s(), 0.03828);
  EXPECT_TRUE(small.bandwidth_bound());
  EXPECT_STREQ(small.bound(), "bandwidth-bound");
  // Batch 64 computes 2 x 16,640 x 64 + 6,400 = 2,136,320 FLOPs (213.632 ms): compute-bound.
  const Roofline big = roofline(decode_step_work(c, 33280, 64.0, 100.0, 5000.0), 1e6, 1e7);
  EXPECT_DOUBLE_EQ(big.compute_s, 0.213632);
  EXPECT_DOUBLE_EQ(big.predicted_s(), 0.213632);
  EXPECT_FALSE(big.bandwidth_bound());
  EXPECT_STREQ(big.bound(), "compute-bound");
}

}  // namespace
}  // namespace kvcheck
