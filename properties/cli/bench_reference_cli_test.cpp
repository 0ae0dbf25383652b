// kvcheck bench --reference-prefill at a tiny size: the JSON fields, the relations that hold
// whatever the machine's speed (the roofline the larger of its two times, the ratio roofline /
// measured), and reference_prefill_work's FLOP count against a count by hand. Never a speed.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "bench/reference_roofline.h"
#include "properties/support/cli_runner.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

TEST(BenchReferencePrefillCli, JsonFieldsAndRelations) {
  testing::TempDir dir;
  const std::string json_path = (dir / "prefill.json").string();
  const testing::CliRun r = testing::run_kvcheck("bench --reference-prefill --tokens 40 --threads 2 --json " +
                                                 testing::shell_quote(json_path));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("roofline / measured"), std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(testing::read_file(json_path));
  EXPECT_EQ(j.at("format"), "kvcheck-bench-reference-prefill");
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("tokens"), 40);
  EXPECT_EQ(j.at("first_logit_row"), 39);
  EXPECT_EQ(j.at("threads"), 2);
  const double gemm = j.at("machine").at("gemm_double_flops_per_s");
  const double copy = j.at("machine").at("copy_bytes_per_s");
  EXPECT_GT(gemm, 0.0);
  EXPECT_GT(copy, 0.0);
  const nlohmann::json& work = j.at("work");
  const double flops = work.at("flops");
  EXPECT_DOUBLE_EQ(flops, work.at("projection_flops").get<double>() + work.at("attention_flops").get<double>() +
                              work.at("lm_head_flops").get<double>());
  const nlohmann::json& m = j.at("measured");
  const double seconds = m.at("seconds");
  EXPECT_GT(seconds, 0.0);
  double parts = 0.0;
  for (const char* key : {"projections_s", "attention_s", "lm_head_s", "other_s"}) parts += m.at(key).get<double>();
  EXPECT_LE(parts, seconds * 1.0001 + 1e-6);
  const nlohmann::json& roof = j.at("roofline");
  EXPECT_DOUBLE_EQ(roof.at("compute_s").get<double>(), flops / gemm);
  EXPECT_DOUBLE_EQ(roof.at("bandwidth_s").get<double>(), work.at("bytes").get<double>() / copy);
  EXPECT_DOUBLE_EQ(roof.at("seconds").get<double>(),
                   std::max(roof.at("compute_s").get<double>(), roof.at("bandwidth_s").get<double>()));
  EXPECT_DOUBLE_EQ(j.at("ratio").get<double>(), roof.at("seconds").get<double>() / seconds);
}

// Hidden 8, 2 query heads / 1 kv head of 4, intermediate 16, vocab 32, 2 layers, 5 tokens.
TEST(ReferencePrefillWork, FlopsMatchAHandCount) {
  testing::TinyShape shape;
  shape.layers = 2;
  shape.heads = 2;
  shape.kv_heads = 1;
  shape.head_dim = 4;
  shape.hidden = 8;
  shape.intermediate = 16;
  shape.vocab = 32;
  ModelConfig c = testing::tiny_config(shape);
  // Per token and layer, multiply-adds: q 8x8 = 64, k 8x4 = 32, v 32, o 64, gate, up, down 8x16 =
  // 128 each: 576, so 2 * 576 * 5 tokens * 2 layers = 11520 FLOPs.
  // Attention: 1 + 2 + 3 + 4 + 5 = 15 causal pairs, 4 * 4 FLOPs each, 2 heads, 2 layers: 960.
  // lm_head from row 3: 2 rows * 2 * 8 * 32 = 1024.
  ReferencePrefillWork w = reference_prefill_work(c, 5, 3);
  EXPECT_EQ(w.projection_flops, 11520.0);
  EXPECT_EQ(w.attention_flops, 960.0);
  EXPECT_EQ(w.lm_head_flops, 1024.0);
  EXPECT_EQ(w.flops(), 11520.0 + 960.0 + 1024.0);
  // A sliding window of 2: 1 + 2 + 2 + 2 + 2 = 9 pairs.
  c.sliding_window = 2;
  w = reference_prefill_work(c, 5, 0);
  EXPECT_EQ(w.attention_flops, 9.0 * 16.0 * 2.0 * 2.0);
  EXPECT_EQ(w.lm_head_flops, 5.0 * 2.0 * 8.0 * 32.0);
}

}  // namespace
}  // namespace kvcheck
