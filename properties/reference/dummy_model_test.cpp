// Dummy-weight shapes (reference/dummy_model.h): each named shape implies its published parameter
// count, so a wrong head count, MLP width, vocabulary or bias shows; unknown names and negative
// layer counts are refused by name; the model made from a shape runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "properties/support/test_support.h"
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

// The config make-model --shape writes (config_to_json), read back as any checkpoint's config.json
// is read: what the count below sees is the written file, not the table.
ModelConfig written_config(const std::string& shape) {
  testing::TempDir dir;
  testing::write_file(dir / "config.json", config_to_json(dummy_shape_config(shape)).dump(2));
  return load_config(dir / "config.json");
}

TEST(DummyModel, SmallRealShapesHaveTheirPublishedParameterCountsInTheWrittenConfig) {
  // Qwen2.5-0.5B: 494,032,768 (tied, QKV biases); Qwen3-0.6B: 596,049,920 (tied, head_dim 128,
  // q_norm / k_norm); Llama-3.2-1B: 1,235,814,400 (tied). The model cards' totals.
  const ModelConfig q25 = written_config("qwen2.5-0.5b");
  EXPECT_EQ(parameters(q25), 494032768);
  EXPECT_EQ(family_name(q25.family), "qwen2");
  EXPECT_TRUE(q25.tie_word_embeddings);
  EXPECT_EQ(q25.max_position_embeddings, 32768);
  EXPECT_EQ(q25.eos_token_ids, (std::vector<std::int64_t>{151643}));

  const ModelConfig q3 = written_config("qwen3-0.6b");
  EXPECT_EQ(parameters(q3), 596049920);
  EXPECT_EQ(family_name(q3.family), "qwen3");
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.q_dim(), 2048);
  EXPECT_EQ(q3.max_position_embeddings, 40960);
  EXPECT_EQ(q3.bos_token_id, std::optional<std::int64_t>(151643));
  EXPECT_EQ(q3.eos_token_ids, (std::vector<std::int64_t>{151645}));

  const ModelConfig l32 = written_config("llama3.2-1b");
  EXPECT_EQ(parameters(l32), 1235814400);
  // SmolLM2-135M: 134,515,008 (tied; the element count of SmolLM2-135M-Instruct.Q4_1.gguf, read
  // from the file in datasets/gguf/smollm2-dequant.json).
  EXPECT_EQ(parameters(dummy_shape_config("smollm2-135m")), 134515008);
  EXPECT_EQ(l32.head_dim, 64);
  EXPECT_EQ(l32.rope_theta, 500000.0);
  EXPECT_EQ(l32.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(l32.rope_scaling.factor, 32.0);
  EXPECT_EQ(l32.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(l32.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(l32.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(l32.max_position_embeddings, 131072);
  EXPECT_EQ(l32.bos_token_id, std::optional<std::int64_t>(128000));
  EXPECT_EQ(l32.eos_token_ids, (std::vector<std::int64_t>{128001}));
  for (const ModelConfig& c : {q25, q3, l32}) {
    EXPECT_EQ(c.torch_dtype, "bfloat16");
    EXPECT_EQ(c.vocab_size, c.family == ModelFamily::kLlama ? 128256 : 151936);
  }
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
