// The engine reads weights as the checkpoint stores them (optimized/engine_weights.h):
//   Bf16AndF16GiveTheLogitsOfTheirFloatValues  a bf16 / f16 model and the f32 model of the same
//       values (exact conversion) give bit-identical logits and tokens through prefill (GEMM) and
//       decode (linear_rows), untied and tied, with biases, on widths that leave tails (44, 52).
//   ViewsTheCheckpointInPlace  every matrix points into the checkpoint's bytes (a tied lm_head into
//       the embedding's), nothing is converted to double (the reference's layer cache stays empty),
//       and bytes() counts the stored bytes.
//   SmolLm2ReadsItsBlocksInPlace  (the fetched GGUF file) the Q4_1 and Q8_0 matrices are read as
//       blocks, each row widening to the reference's dequantized row (Q/K rows moved back to
//       Hugging Face order), and the logits are bit for bit those of the same model's float32
//       tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "optimized/engine.h"
#include "properties/support/model_fixtures.h"
#include "reference/model.h"
#include "reference/random_model.h"
#include "reference/weights.h"

namespace kvcheck {
namespace {

using testing::test_tokens;
using testing::tiny_config;

ModelConfig awkward_config(bool tie) {
  testing::TinyShape shape;
  shape.hidden = 44;        // 44 % 8 == 4: every projection from the hidden state has a tail
  shape.head_dim = 10;
  shape.intermediate = 52;  // and the down projection too
  shape.vocab = 70;
  ModelConfig c = tiny_config(shape);
  c.tie_word_embeddings = tie;
  c.qkv_bias = true;
  c.o_bias = true;
  return c;
}

// The same tensors converted to F32 (exact from bf16 and f16).
std::shared_ptr<TensorMap> as_f32(const TensorMap& t) {
  auto out = std::make_shared<TensorMap>();
  for (const std::string& name : t.names()) {
    const TensorView v = *t.find(name);
    std::vector<float> values(static_cast<std::size_t>(v.numel()));
    to_float(v, values, name);
    out->add_float(name, DType::kF32, v.shape, values);
  }
  return out;
}

EngineGenerateResult run(const ReferenceModel& model, const std::vector<std::int32_t>& prompt,
                         std::int64_t page_bytes = 512) {
  EngineOptions o;
  o.policy = "full-fp32";
  o.page_bytes = page_bytes;
  o.threads = 2;
  auto engine = make_engine(model, o);
  EngineGenerateOptions go;
  go.max_new_tokens = 12;
  go.stop_at_eos = false;
  go.keep_logits = true;
  return engine_generate(*engine, 0, prompt, go);
}

TEST(EngineWeights, Bf16AndF16GiveTheLogitsOfTheirFloatValues) {
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const bool tie : {false, true}) {
      const ModelConfig c = awkward_config(tie);
      const auto stored = std::make_shared<TensorMap>(make_random_weights(c, dtype, 11));
      const ReferenceModel model(c, stored, "<stored>");
      const ReferenceModel model_f32(c, as_f32(*stored), "<f32>");
      const std::vector<std::int32_t> prompt = test_tokens(23, c.vocab_size, 4);
      const EngineGenerateResult got = run(model, prompt);
      const EngineGenerateResult want = run(model_f32, prompt);
      const std::string what = std::string(dtype_name(dtype)) + (tie ? ", tied" : ", untied");
      EXPECT_EQ(got.generated, want.generated) << what;
      ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
      ASSERT_EQ(got.logits.size(), static_cast<std::size_t>((23 + 12) * c.vocab_size)) << what;
      EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), got.logits.size() * sizeof(float)), 0) << what;
    }
  }
}

TEST(EngineWeights, ViewsTheCheckpointInPlace) {
  for (const bool tie : {false, true}) {
    const ModelConfig c = awkward_config(tie);
    const auto stored = std::make_shared<TensorMap>(make_random_weights(c, DType::kBF16, 3));
    const ReferenceModel model(c, stored, "<stored>");
    EngineOptions o;
    o.page_bytes = 512;
    auto engine = make_engine(model, o);
    const EngineWeights& w = engine->weights;
    const auto at = [&](const std::string& name) { return stored->find(name)->bytes.data(); };
    EXPECT_EQ(w.embedding.data, at("model.embed_tokens.weight"));
    EXPECT_EQ(w.embedding.dtype, WeightDType::kBF16);
    EXPECT_EQ(w.lm_head.w.data, tie ? at("model.embed_tokens.weight") : at("lm_head.weight"));
    EXPECT_EQ(w.layers[1].q.w.data, at("model.layers.1.self_attn.q_proj.weight"));
    EXPECT_EQ(w.layers[1].down.w.data, at("model.layers.1.mlp.down_proj.weight"));
    EXPECT_EQ(w.layers[1].down.in(), c.intermediate_size);
    EXPECT_EQ(model.weights().resident_bytes(), 0u) << "the engine converted weights through the reference's cache";
    std::int64_t want_bytes = 0;
    for (const ExpectedTensor& t : expected_tensors(c)) {
      if (t.shape.size() == 2) want_bytes += stored->find(t.name)->numel() * 2;
      else if (t.name.ends_with(".bias")) want_bytes += stored->find(t.name)->numel() * 4;
    }
    EXPECT_EQ(w.bytes(), want_bytes);
  }
}

TEST(EngineWeights, SmolLm2ReadsItsBlocksInPlace) {
  const std::filesystem::path path = testing::smollm2_gguf();
  if (path.empty()) GTEST_SKIP() << testing::kSmolLm2Missing;
  const ReferenceModel model = ReferenceModel::load(path);
  const ModelConfig& c = model.config();
  const TensorSource& source = *model.weights().shared_source();
  EngineOptions o;
  o.page_bytes = 4096;
  auto engine = make_engine(model, o);
  const EngineWeights& w = engine->weights;
  EXPECT_EQ(w.embedding.dtype, WeightDType::kQ8_0);
  EXPECT_EQ(w.lm_head.w.data, w.embedding.data);
  std::int64_t want_bytes = w.embedding.bytes();
  // Each matrix as blocks, its rows widening to the reference's float32 rows.
  const auto expect_rows = [&](const WeightMatrix& m, const std::string& name, WeightDType dtype) {
    SCOPED_TRACE(name);
    EXPECT_EQ(m.dtype, dtype);
    const TensorView f = *source.find(name);
    ASSERT_EQ(f.dtype, DType::kF32);
    ASSERT_EQ(f.numel(), m.rows * m.cols);
    std::vector<float> row(static_cast<std::size_t>(m.cols));
    for (const std::int64_t r : {std::int64_t{0}, std::int64_t{1}, m.rows / 2 + 1, m.rows - 1}) {
      m.widen_row_to(r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), f.bytes.data() + r * m.cols * 4, row.size() * 4), 0) << "row " << r;
    }
  };
  expect_rows(w.embedding, "model.embed_tokens.weight", WeightDType::kQ8_0);
  for (const std::int64_t l : {std::int64_t{0}, c.num_hidden_layers - 1}) {
    const EngineLayer& e = w.layers[static_cast<std::size_t>(l)];
    expect_rows(e.q.w, layer_tensor_name(l, "self_attn.q_proj.weight"), WeightDType::kQ4_1);
    expect_rows(e.k.w, layer_tensor_name(l, "self_attn.k_proj.weight"), WeightDType::kQ4_1);
    expect_rows(e.down.w, layer_tensor_name(l, "mlp.down_proj.weight"), WeightDType::kQ4_1);
  }
  for (const EngineLayer& e : w.layers) {
    for (const DenseWeight* d : {&e.q, &e.k, &e.v, &e.o, &e.gate, &e.up, &e.down}) want_bytes += d->w.bytes();
  }
  EXPECT_EQ(w.bytes(), want_bytes);
  EXPECT_LT(w.bytes(), 100'000'000);  // 96 MB of blocks, where their float32 copy is 538 MB
  // The same model over its float32 tensors: the same logits, bit for bit.
  auto floats = std::make_shared<TensorMap>();
  for (const std::string& name : source.names()) {
    const TensorView v = *source.find(name);
    floats->add(name, v.dtype, v.shape, v.bytes);
  }
  const ReferenceModel model_f32(c, floats, "<f32>");
  const std::vector<std::int32_t> prompt = test_tokens(23, c.vocab_size, 4);
  const EngineGenerateResult got = run(model, prompt, 4096);
  const EngineGenerateResult want = run(model_f32, prompt, 4096);
  EXPECT_EQ(got.generated, want.generated);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), got.logits.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace kvcheck
