// Dummy-weight shapes (reference/dummy_model.h): each named shape implies its published parameter
// count, so a wrong head count, MLP width, vocabulary or bias shows; unknown names and negative
// layer counts are refused by name; the model made from a shape runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "reference/dummy_model.h"
#include "reference/errors.h"
#include "reference/weights.h"

namespace kvcheck {
namespace {

std::int64_t parameters(const ModelConfig& c) {
  std::int64_t n = 0;
  for (const ExpectedTensor& t : expected_tensors(c)) {
    std::int64_t elements = 1;
    for (std::int64_t d : t.shape) elements *= d;
    n += elements;
  }
  return n;
}

TEST(DummyModel, ShapesHaveTheirPublishedParameterCounts) {
  // The counts of the published checkpoints (Llama-3-8B: 8.03B; Qwen2.5-7B: 7.62B with its QKV
  // biases; Llama-2-7B: 6.74B).
  EXPECT_EQ(parameters(dummy_shape_config("llama3-8b")), 8030261248);
  EXPECT_EQ(parameters(dummy_shape_config("qwen2.5-7b")), 7615616512);
  EXPECT_EQ(parameters(dummy_shape_config("llama2-7b")), 6738415616);
  const ModelConfig l3 = dummy_shape_config("llama3-8b");
  EXPECT_EQ(l3.head_dim, 128);
  EXPECT_EQ(l3.group_size(), 4);
  EXPECT_EQ(dummy_shape_config("llama3-8b", 2).num_hidden_layers, 2);
}

TEST(DummyModel, UnknownShapesAndBadLayerCountsAreNamed) {
  try {
    (void)dummy_shape_config("gpt5");
    FAIL() << "an unknown shape was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--shape: gpt5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen2.5-7b"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)dummy_shape_config("llama3-8b", -1), InputError);
}

TEST(DummyModel, ASmallShapeRunsAndIsSeeded) {
  const ModelConfig c = dummy_shape_config("kvcheck-tiny", 1);
  const ReferenceModel a = make_dummy_model(c, "kvcheck-tiny", 3);
  const ReferenceModel b = make_dummy_model(c, "kvcheck-tiny", 3);
  const ReferenceModel other = make_dummy_model(c, "kvcheck-tiny", 4);
  EXPECT_EQ(a.origin(), "dummy:kvcheck-tiny");
  const std::vector<std::int32_t> tokens{1, 50, 900, 7};
  const auto la = a.forward(tokens);
  EXPECT_TRUE(la.allFinite());
  EXPECT_EQ(la, b.forward(tokens));
  EXPECT_NE(la, other.forward(tokens));
}

}  // namespace
}  // namespace kvcheck
