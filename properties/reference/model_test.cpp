// The reference transformer end to end on tiny random models: the two decode paths agree, a
// checkpoint written to disk reads back bit-identical, GQA equals MHA with duplicated KV heads,
// and every bad model or request is rejected with a message that names it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include "oracles/metrics.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"
#include "reference/errors.h"
#include "reference/model.h"
#include "reference/random_model.h"
#include "reference/safetensors.h"
#include "reference/weights.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;

using testing::TempDir;
using testing::test_tokens;
using testing::tiny_config;
using testing::tiny_model;

std::span<const float> all(const MatrixRM& m) { return {m.data(), static_cast<std::size_t>(m.size())}; }

// The KV-cache path and full recompute are the same mathematics; only the rounding of the double
// GEMMs (whose blocking depends on the row count) may differ, ~1e-30 in NMSE. The bar,
// 1e-12, is far below any real bug (a wrong position or a missing cache row gives ~1e-2).
constexpr double kDecodePathNmse = 1e-12;

TEST(ReferenceModel, KvCacheDecodeEqualsFullRecompute) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 11);
  const std::vector<std::int32_t> tokens = test_tokens(37, c.vocab_size, 3);
  const MatrixRM full = model.forward(tokens);
  ASSERT_EQ(full.rows(), 37);
  ASSERT_EQ(full.cols(), c.vocab_size);

  KVCache cache(c, 64);
  MatrixRM inc(37, c.vocab_size);
  const std::int64_t chunks[] = {5, 1, 1, 13, 1, 16};  // prefill, decode steps, a second chunk, ...
  std::int64_t at = 0;
  for (const std::int64_t n : chunks) {
    inc.middleRows(at, n) = model.forward(std::span<const std::int32_t>(tokens.data() + at, n), cache);
    at += n;
  }
  ASSERT_EQ(at, 37);
  EXPECT_EQ(cache.size(), 37);
  EXPECT_LT(nmse(all(inc), all(full)), kDecodePathNmse);
  EXPECT_TRUE(full.allFinite());
}

TEST(ReferenceModel, LogitsDependOnEveryEarlierTokenButNoLaterOne) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 5);
  std::vector<std::int32_t> a = test_tokens(12, c.vocab_size, 9);
  std::vector<std::int32_t> b = a;
  b[11] = (b[11] + 1) % static_cast<std::int32_t>(c.vocab_size);  // change the last token
  const MatrixRM la = model.forward(a), lb = model.forward(b);
  EXPECT_EQ(la.topRows(11), lb.topRows(11));  // causal: earlier positions unchanged, bit for bit
  EXPECT_NE(la.row(11), lb.row(11));
  std::vector<std::int32_t> d = a;
  d[0] = (d[0] + 1) % static_cast<std::int32_t>(c.vocab_size);  // change the first token
  const MatrixRM ld = model.forward(d);
  EXPECT_NE(la.row(11), ld.row(11));
}

TEST(ReferenceModel, GqaEqualsMhaWithDuplicatedKvHeads) {
  testing::TinyShape shape;
  shape.heads = 4;
  shape.kv_heads = 2;
  const ModelConfig gqa = tiny_config(shape);
  TensorMap weights = make_random_weights(gqa, DType::kF32, 21);
  // The MHA twin: 4 kv heads, k/v projections of kv head g copied to heads 2g and 2g + 1.
  ModelConfig mha = gqa;
  mha.num_key_value_heads = 4;
  TensorMap mha_weights = weights;
  for (std::int64_t l = 0; l < gqa.num_hidden_layers; ++l) {
    for (const char* proj : {"self_attn.k_proj.weight", "self_attn.v_proj.weight"}) {
      const std::string name = layer_tensor_name(l, proj);
      const TensorView t = *weights.find(name);
      std::vector<float> src(static_cast<std::size_t>(t.numel()));
      to_float(t, src, name);
      const std::int64_t d = gqa.head_dim, h = gqa.hidden_size;
      std::vector<float> dst(static_cast<std::size_t>(4 * d * h));
      for (std::int64_t head = 0; head < 4; ++head) {
        std::copy_n(src.begin() + (head / 2) * d * h, d * h, dst.begin() + head * d * h);
      }
      mha_weights.add_float(name, DType::kF32, {4 * d, h}, dst);
    }
  }
  const ReferenceModel a(gqa, std::make_shared<TensorMap>(weights), "gqa");
  const ReferenceModel b(mha, std::make_shared<TensorMap>(mha_weights), "mha");
  const std::vector<std::int32_t> tokens = test_tokens(19, gqa.vocab_size, 4);
  const MatrixRM la = a.forward(tokens), lb = b.forward(tokens);
  EXPECT_LT(nmse(all(la), all(lb)), 1e-12);
}

class MakeModelRoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(MakeModelRoundTrip, CheckpointReadBackGivesBitIdenticalLogits) {
  TempDir dir;
  const ModelConfig c = tiny_config();
  const TensorMap weights = make_random_weights(c, GetParam(), 77);
  write_model(dir.path(), c, weights);
  const ReferenceModel in_memory(c, std::make_shared<TensorMap>(weights), "memory");
  const ReferenceModel from_disk = ReferenceModel::load(dir.path());
  EXPECT_EQ(from_disk.config().hidden_size, c.hidden_size);
  EXPECT_EQ(from_disk.config().eos_token_ids, c.eos_token_ids);
  const std::vector<std::int32_t> tokens = test_tokens(9, c.vocab_size, 1);
  EXPECT_EQ(in_memory.forward(tokens), from_disk.forward(tokens));
}

std::string dtype_param_name(const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); }

INSTANTIATE_TEST_SUITE_P(AllFloatDtypes, MakeModelRoundTrip, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         dtype_param_name);

TEST(ReferenceModel, SameSeedSameBytesOtherSeedOtherBytes) {
  TempDir dir;
  const ModelConfig c = tiny_config();
  write_model(dir / "a", c, make_random_weights(c, DType::kBF16, 3));
  write_model(dir / "b", c, make_random_weights(c, DType::kBF16, 3));
  write_model(dir / "c", c, make_random_weights(c, DType::kBF16, 4));
  const std::string a = testing::read_file(dir / "a" / "model.safetensors");
  EXPECT_EQ(a, testing::read_file(dir / "b" / "model.safetensors"));
  EXPECT_NE(a, testing::read_file(dir / "c" / "model.safetensors"));
}

// Random weights are drawn in fixed chunks of the generator's sequence, on several threads for a
// big tensor: value i of a tensor is the same whatever the tensor's size, so the embedding of a
// 16384-token vocabulary (threaded: 128 chunks) starts with the bytes of a 1024-token one (one
// thread: 8 chunks). GoldenLogits.FixedRandomModelFixedPrompt pins the sequence itself.
TEST(ReferenceModel, RandomWeightsDoNotDependOnTensorSizeOrThreads) {
  testing::TinyShape small_shape;
  small_shape.vocab = 1024;
  testing::TinyShape big_shape = small_shape;
  big_shape.vocab = 16384;
  const TensorMap small = make_random_weights(tiny_config(small_shape), DType::kF32, 5);
  const TensorMap big = make_random_weights(tiny_config(big_shape), DType::kF32, 5);
  const TensorView a = *small.find("model.embed_tokens.weight");
  const TensorView b = *big.find("model.embed_tokens.weight");
  ASSERT_EQ(b.bytes.size(), 16 * a.bytes.size());
  EXPECT_TRUE(std::equal(a.bytes.begin(), a.bytes.end(), b.bytes.begin()));
  // And the rest is not a repetition of the prefix.
  EXPECT_FALSE(std::equal(a.bytes.begin(), a.bytes.end(), b.bytes.begin() + static_cast<std::ptrdiff_t>(a.bytes.size())));
}

TEST(ReferenceModel, ShardedCheckpointEqualsSingleFile) {
  TempDir dir;
  const ModelConfig c = tiny_config();
  const TensorMap weights = make_random_weights(c, DType::kF32, 8);
  write_model(dir / "single", c, weights);

  // Split: layer 0 and the embedding in shard 1, everything else in shard 2.
  const std::filesystem::path sharded = dir / "sharded";
  std::filesystem::create_directories(sharded);
  std::filesystem::copy_file(dir / "single" / "config.json", sharded / "config.json");
  TensorMap first, second;
  nlohmann::json index;
  for (const std::string& name : weights.names()) {
    const TensorView t = *weights.find(name);
    const bool in_first = name.starts_with("model.layers.0.") || name == "model.embed_tokens.weight";
    (in_first ? first : second).add(name, t.dtype, t.shape, t.bytes);
    index["weight_map"][name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(sharded / "model-00001-of-00002.safetensors", first);
  write_safetensors(sharded / "model-00002-of-00002.safetensors", second);
  testing::write_file(sharded / "model.safetensors.index.json", index.dump());

  const std::vector<std::int32_t> tokens = test_tokens(7, c.vocab_size, 2);
  EXPECT_EQ(ReferenceModel::load(dir / "single").forward(tokens), ReferenceModel::load(sharded).forward(tokens));
}

TEST(ReferenceModel, LayersConvertedOnEachUseWhenTheyDoNotFitTheBudget) {
  const ModelConfig c = tiny_config();
  LoadOptions none;
  none.max_resident_bytes = 0;
  const ReferenceModel lean = tiny_model(c, 12, DType::kBF16, none);
  const ReferenceModel kept = tiny_model(c, 12, DType::kBF16);
  const std::vector<std::int32_t> tokens = test_tokens(6, c.vocab_size, 6);
  EXPECT_EQ(lean.forward(tokens), kept.forward(tokens));
  EXPECT_EQ(lean.weights().resident_bytes(), 0U);
  EXPECT_GT(kept.weights().resident_bytes(), 0U);
}

TEST(ReferenceModel, BiasesAndNormWeightsAreUsed) {
  testing::TinyShape shape;
  ModelConfig c = tiny_config(shape);
  c.family = ModelFamily::kQwen2;
  c.qkv_bias = true;
  TensorMap weights = make_random_weights(c, DType::kF32, 13);
  const std::vector<std::int32_t> tokens = test_tokens(5, c.vocab_size, 13);
  const MatrixRM base = ReferenceModel(c, std::make_shared<TensorMap>(weights), "qwen2").forward(tokens);
  for (const std::string& name : {layer_tensor_name(1, "self_attn.k_proj.bias"), layer_tensor_name(0, "self_attn.v_proj.bias"),
                                 layer_tensor_name(1, "post_attention_layernorm.weight"), std::string("model.norm.weight")}) {
    TensorMap changed = weights;
    const TensorView t = *weights.find(name);
    changed.add_float(name, DType::kF32, t.shape, std::vector<float>(static_cast<std::size_t>(t.numel()), 0.5F));
    const MatrixRM other = ReferenceModel(c, std::make_shared<TensorMap>(changed), "qwen2").forward(tokens);
    EXPECT_NE(base, other) << name << " had no effect";
  }
}

// Qwen3: with q_norm / k_norm weights of 1, every q and k head leaves the norm with mean square
// ms / (ms + eps), and RoPE (a rotation of pairs within the head) keeps it, so the post-RoPE q and
// k the recorder sees have unit RMS per head. A Llama model of the same shape does not; a norm
// over the whole row, or one forgotten, would not either.
class RecordQk : public AttentionRecorder {
 public:
  void on_qkv(std::int64_t, std::int64_t, const MatrixRMd& q, const MatrixRMd& k, const MatrixRMd&) override {
    qs.push_back(q);
    ks.push_back(k);
  }
  std::vector<MatrixRMd> qs, ks;
};

double max_head_rms_error(const std::vector<MatrixRMd>& xs, std::int64_t head_dim) {
  double worst = 0.0;
  for (const MatrixRMd& x : xs) {
    for (Eigen::Index t = 0; t < x.rows(); ++t) {
      for (Eigen::Index h = 0; h < x.cols() / head_dim; ++h) {
        const double ms = x.row(t).segment(h * head_dim, head_dim).squaredNorm() / static_cast<double>(head_dim);
        worst = std::max(worst, std::abs(ms - 1.0));
      }
    }
  }
  return worst;
}

TEST(ReferenceModel, Qwen3NormalizesEveryQAndKHeadBeforeRope) {
  testing::TinyShape shape;
  shape.hidden = 24;  // heads 4 x head_dim 8 = 32 != hidden: q_dim is not the hidden size
  ModelConfig c = tiny_config(shape);
  c.family = ModelFamily::kQwen3;
  c.rms_norm_eps = 1e-9;
  c.tie_word_embeddings = true;
  TensorMap weights = make_random_weights(c, DType::kF32, 21);
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const char* norm : {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}) {
      weights.add_float(layer_tensor_name(l, norm), DType::kF32, {c.head_dim},
                        std::vector<float>(static_cast<std::size_t>(c.head_dim), 1.0F));
    }
  }
  const std::vector<std::int32_t> tokens = test_tokens(6, c.vocab_size, 21);
  RecordQk qwen3;
  (void)ReferenceModel(c, std::make_shared<TensorMap>(weights), "qwen3").forward(tokens, &qwen3);
  ASSERT_EQ(qwen3.qs.size(), 2U);
  EXPECT_LT(max_head_rms_error(qwen3.qs, c.head_dim), 1e-6);
  EXPECT_LT(max_head_rms_error(qwen3.ks, c.head_dim), 1e-6);

  ModelConfig llama = c;
  llama.family = ModelFamily::kLlama;
  RecordQk plain;
  (void)tiny_model(llama, 21).forward(tokens, &plain);
  EXPECT_GT(max_head_rms_error(plain.qs, c.head_dim), 1e-2);
}

TEST(ReferenceModel, Qwen3QkNormWeightsAreUsedAndRequired) {
  testing::TinyShape shape;
  ModelConfig c = tiny_config(shape);
  c.family = ModelFamily::kQwen3;
  const TensorMap weights = make_random_weights(c, DType::kF32, 23);
  const std::vector<std::int32_t> tokens = test_tokens(5, c.vocab_size, 23);
  const MatrixRM base = ReferenceModel(c, std::make_shared<TensorMap>(weights), "qwen3").forward(tokens);
  for (const std::string& name : {layer_tensor_name(0, "self_attn.q_norm.weight"), layer_tensor_name(1, "self_attn.k_norm.weight")}) {
    TensorMap changed = weights;
    const TensorView t = *weights.find(name);
    EXPECT_EQ(t.shape, (std::vector<std::int64_t>{c.head_dim}));
    std::vector<float> values(static_cast<std::size_t>(t.numel()), 1.0F);
    values[1] = 1.5F;  // one channel of the head
    changed.add_float(name, DType::kF32, t.shape, values);
    const MatrixRM other = ReferenceModel(c, std::make_shared<TensorMap>(changed), "qwen3").forward(tokens);
    EXPECT_NE(base, other) << name << " had no effect";
    TensorMap missing = weights;
    missing.erase(name);
    expect_input_error([&] { ReferenceModel(c, std::make_shared<TensorMap>(missing), "qwen3/config.json"); },
                       {name, "missing tensor"});
  }
}

class RecordEverything : public AttentionRecorder {
 public:
  void on_qkv(std::int64_t layer, std::int64_t pos0, const MatrixRMd& q, const MatrixRMd& k, const MatrixRMd&) override {
    if (layer == 0) qkv_calls.push_back({pos0, q.rows(), q.cols(), k.cols()});
  }
  bool wants_probs(std::int64_t layer) const override { return layer == 1; }
  void on_probs(std::int64_t layer, std::int64_t, std::int64_t query_pos, std::span<const double> probs) override {
    EXPECT_EQ(layer, 1);
    double sum = 0;
    for (std::size_t j = 0; j < probs.size(); ++j) {
      sum += probs[j];
      if (static_cast<std::int64_t>(j) > query_pos) {
        EXPECT_EQ(probs[j], 0.0);  // causal
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
    // Keys held when the query ran: 4 after the first call, 6 after the second.
    EXPECT_EQ(static_cast<std::int64_t>(probs.size()), query_pos < 4 ? 4 : 6);
    ++prob_rows;
  }
  std::vector<std::array<std::int64_t, 4>> qkv_calls;
  int prob_rows = 0;
};

TEST(ReferenceModel, RecorderSeesPostRopeQkvAndProbabilities) {
  const ModelConfig c = tiny_config();
  const ReferenceModel model = tiny_model(c, 4);
  const std::vector<std::int32_t> tokens = test_tokens(6, c.vocab_size, 4);
  KVCache cache(c, 8);
  RecordEverything rec;
  model.forward(std::span<const std::int32_t>(tokens.data(), 4), cache, &rec);
  model.forward(std::span<const std::int32_t>(tokens.data() + 4, 2), cache, &rec);
  ASSERT_EQ(rec.qkv_calls.size(), 2U);
  EXPECT_EQ(rec.qkv_calls[0], (std::array<std::int64_t, 4>{0, 4, c.q_dim(), c.kv_dim()}));
  EXPECT_EQ(rec.qkv_calls[1], (std::array<std::int64_t, 4>{4, 2, c.q_dim(), c.kv_dim()}));
  EXPECT_EQ(rec.prob_rows, 6 * c.num_attention_heads);
}

TEST(ReferenceModel, Llama3RopeScalingAndSlidingWindowRun) {
  ModelConfig c = tiny_config();
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_max_position_embeddings = 16;
  c.rope_theta = 500000;
  const ReferenceModel scaled = tiny_model(c, 2);
  ModelConfig windowed = tiny_config();
  windowed.family = ModelFamily::kMistral;
  windowed.sliding_window = 4;
  const ReferenceModel sw = tiny_model(windowed, 2);
  const ReferenceModel plain = tiny_model(tiny_config(), 2);
  const std::vector<std::int32_t> tokens = test_tokens(10, c.vocab_size, 5);
  const MatrixRM lp = plain.forward(tokens), ls = scaled.forward(tokens), lw = sw.forward(tokens);
  EXPECT_NE(lp, ls);
  // The window only matters once a query has more than 4 keys behind it.
  EXPECT_EQ(lp.topRows(4), lw.topRows(4));
  EXPECT_NE(lp.row(9), lw.row(9));
  // The windowed model's cache path agrees with its recompute path too.
  KVCache cache(windowed, 10);
  MatrixRM inc(10, c.vocab_size);
  for (int t = 0; t < 10; ++t) inc.row(t) = sw.forward(std::span<const std::int32_t>(&tokens[t], 1), cache);
  EXPECT_LT(nmse(all(inc), all(lw)), kDecodePathNmse);
}

// ---- bad input ----

TEST(ReferenceModelBadInput, MissingTensorIsNamed) {
  TempDir dir;
  const ModelConfig c = tiny_config();
  TensorMap weights = make_random_weights(c, DType::kF32, 1);
  weights.erase(layer_tensor_name(1, "mlp.up_proj.weight"));
  write_safetensors(dir / "model.safetensors", weights);
  testing::write_file(dir / "config.json", config_to_json(c).dump());
  expect_input_error([&] { ReferenceModel::load(dir.path()); },
                     {"model.layers.1.mlp.up_proj.weight", "missing tensor", (dir / "config.json").string()});
}

TEST(ReferenceModelBadInput, ShapeThatDoesNotMatchTheConfigIsNamed) {
  TempDir dir;
  const ModelConfig c = tiny_config();
  TensorMap weights = make_random_weights(c, DType::kF32, 1);
  const std::string name = layer_tensor_name(0, "self_attn.k_proj.weight");
  weights.add_float(name, DType::kF32, {c.q_dim(), c.hidden_size},
                    std::vector<float>(static_cast<std::size_t>(c.q_dim() * c.hidden_size), 0.0F));
  write_safetensors(dir / "model.safetensors", weights);
  testing::write_file(dir / "config.json", config_to_json(c).dump());
  expect_input_error([&] { ReferenceModel::load(dir.path()); },
                     {name, "shape [32, 32]", "[16, 32]", (dir / "model.safetensors").string()});
}

TEST(ReferenceModelBadInput, NonFloatDtypeIsNamed) {
  TempDir dir;
  const ModelConfig c = tiny_config();
  TensorMap weights = make_random_weights(c, DType::kF32, 1);
  const std::vector<std::byte> bytes(static_cast<std::size_t>(c.hidden_size) * 4);
  weights.add("model.norm.weight", DType::kI32, {c.hidden_size}, bytes);
  write_safetensors(dir / "model.safetensors", weights);
  testing::write_file(dir / "config.json", config_to_json(c).dump());
  expect_input_error([&] { ReferenceModel::load(dir.path()); }, {"model.norm.weight", "I32", "model.safetensors"});
}

TEST(ReferenceModelBadInput, EmptyPromptOutOfVocabularyAndTooLong) {
  testing::TinyShape shape;
  shape.max_positions = 16;
  const ModelConfig c = tiny_config(shape);
  const ReferenceModel model = tiny_model(c, 1);
  expect_input_error([&] { model.forward(std::vector<std::int32_t>{}); }, {"empty"});
  expect_input_error([&] { model.forward(std::vector<std::int32_t>{1, 2, 40}); },
                     {"token id 40", "index 2", "[0, 40)"});
  expect_input_error([&] { model.forward(std::vector<std::int32_t>{1, -1}); }, {"token id -1"});
  expect_input_error([&] { model.forward(test_tokens(17, c.vocab_size, 1)); },
                     {"17 tokens", "max_position_embeddings 16"});
  // Through the cache too: 10 + 7 > 16.
  KVCache cache(c, 16);
  model.forward(test_tokens(10, c.vocab_size, 1), cache);
  expect_input_error([&] { model.forward(test_tokens(7, c.vocab_size, 1), cache); }, {"position 10"});
  EXPECT_EQ(cache.size(), 10);  // the failed call appended nothing
}

TEST(ReferenceModelBadInput, NanWeightsNameTheLayer) {
  const ModelConfig c = tiny_config();
  TensorMap weights = make_random_weights(c, DType::kF32, 1);
  const std::string name = layer_tensor_name(1, "mlp.down_proj.weight");
  std::vector<float> poisoned(static_cast<std::size_t>(c.hidden_size * c.intermediate_size), 0.01F);
  poisoned[5] = std::nanf("");
  weights.add_float(name, DType::kF32, {c.hidden_size, c.intermediate_size}, poisoned);
  const ReferenceModel model(c, std::make_shared<TensorMap>(weights), "poisoned");
  expect_input_error([&] { model.forward(test_tokens(3, c.vocab_size, 1)); }, {"model.layers.1", "non-finite", "poisoned"});
}

}  // namespace
}  // namespace kvcheck

namespace kvcheck {
namespace {

// forward_from computes the lm_head of the last rows only; its rows are the full forward's rows
// bit for bit, wherever first_logit_row falls in the 64-row logit tiles, on both decode paths.
// A shape with several attention blocks (128), projection row tiles (256) and vocabulary tiles.
TEST(ReferenceModelForwardFrom, RowsAreTheFullForwardsRowsBitForBit) {
  testing::TinyShape shape;
  shape.vocab = 300;
  const ModelConfig c = tiny_config(shape);
  const ReferenceModel model = tiny_model(c, 23);
  const std::vector<std::int32_t> tokens = test_tokens(290, c.vocab_size, 4);
  const MatrixRM full = model.forward(tokens);
  for (const std::int64_t first : {0, 1, 63, 64, 65, 200, 289}) {
    SCOPED_TRACE(first);
    const MatrixRM tail = model.forward_from(tokens, first);
    ASSERT_EQ(tail.rows(), 290 - first);
    EXPECT_TRUE(tail == full.bottomRows(290 - first));
    KVCache a(c, 290), b(c, 290);
    EXPECT_TRUE(model.forward_from(tokens, a, first) == model.forward(tokens, b).bottomRows(290 - first));
  }
  EXPECT_THROW(model.forward_from(tokens, 290), std::invalid_argument);
  EXPECT_THROW(model.forward_from(tokens, -1), std::invalid_argument);
}

// The forward's threads share tiles, attention items and rows, each computed whole by one thread:
// the logits are the same bits for any thread count, with and without a sliding window.
TEST(ReferenceModelForwardFrom, ThreadCountDoesNotChangeABit) {
  testing::TinyShape shape;
  shape.vocab = 300;
  for (const std::int64_t window : {0, 37}) {
    ModelConfig c = tiny_config(shape);
    if (window > 0) c.family = ModelFamily::kMistral;  // the family that may set a window
    c.sliding_window = window;
    ReferenceModel model = tiny_model(c, 29);
    const std::vector<std::int32_t> tokens = test_tokens(270, c.vocab_size, 8);
    model.set_threads(1);
    const MatrixRM one = model.forward(tokens);
    for (const int threads : {2, 5}) {
      model.set_threads(threads);
      EXPECT_TRUE(model.forward(tokens) == one) << threads << " threads, window " << window;
    }
  }
}

}  // namespace
}  // namespace kvcheck
