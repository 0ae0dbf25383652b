// kvcheck bench --engine on the embedded model, a few seconds: the JSON's relations that hold
// whatever the machine's speed. --repeat N gives N values per run with their mean and sample
// standard deviation; the engine's prompt tokens and decode tokens are what the runs fed and
// produced (pp / tg); the per-token breakdown's parts add up to its total, which is the inverse of
// tg; the roofline's prediction is the larger of its two times at the batch the run achieved.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using nlohmann::json;

std::vector<double> values_of(const json& j) { return j.at("values").get<std::vector<double>>(); }

// kvcheck-tiny's projection weights (4 layers x (q 128x128 + k, v 64x128 + o 128x128 + gate, up,
// down 3 x 384x128) = 4 x 196,608) and its tied head (2048x128 = 262,144).
constexpr double kTinyWeights = 4.0 * 196608.0 + 262144.0;

// `kvcheck bench --engine ARGS --json FILE`: the run, and its JSON (null unless it exited 0).
struct EngineBench {
  testing::CliRun run;
  json j;
};
EngineBench bench_engine(const std::string& args) {
  testing::TempDir dir;
  const std::filesystem::path out = dir / "engine.json";
  EngineBench b{testing::run_kvcheck("bench --engine " + args + " --json " + testing::shell_quote(out)), json()};
  if (b.run.code == 0) b.j = json::parse(testing::read_file(out));
  return b;
}

void expect_mean_sd(const json& j, std::size_t n) {
  const std::vector<double> v = values_of(j);
  ASSERT_EQ(v.size(), n);
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
  double ss = 0.0;
  for (double x : v) ss += (x - mean) * (x - mean);
  EXPECT_NEAR(j.at("mean").get<double>(), mean, 1e-9 * mean);
  EXPECT_NEAR(j.at("sd").get<double>(), std::sqrt(ss / static_cast<double>(n - 1)), 1e-9 * mean);
}

// --no-reference: only the engine rows (with their roofline), no ratios; the load time is reported.
TEST(BenchEngineCli, NoReferenceRunsOnlyTheEngine) {
  const EngineBench bench = bench_engine("--prompt-tokens 8 --new-tokens 4 --batch 3 --no-reference --threads 1");
  ASSERT_EQ(bench.run.code, 0) << bench.run.output;
  ASSERT_EQ(bench.j.at("runs").size(), 2u);
  EXPECT_EQ(bench.j["runs"][0]["name"], "engine batch 1");
  EXPECT_EQ(bench.j["runs"][1]["name"], "engine batch 3");
  EXPECT_TRUE(bench.j["runs"][1].contains("roofline"));
  EXPECT_TRUE(bench.j.at("ratios").is_null());
  EXPECT_GT(bench.j.at("load_seconds").get<double>(), 0.0);
  EXPECT_NE(bench.run.output.find("not measured (--no-reference)"), std::string::npos) << bench.run.output;
  EXPECT_EQ(bench.run.output.find("reference batch 1"), std::string::npos) << bench.run.output;
}

TEST(BenchEngineCli, RepeatsSplitsBreaksDownAndPredicts) {
  // 5 requests of 8 prompt tokens, 6 new tokens each: the prefill gives each its first token, 5
  // decode steps the other 5.
  const EngineBench bench = bench_engine("--prompt-tokens 8 --new-tokens 6 --batch 5 --repeat 3 --policy int8 --threads 1");
  const testing::CliRun& r = bench.run;
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* text : {"pp tokens/s", "tg tokens/s", "projections", "page manager", "roofline", " ± "}) {
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  }
  const json& j = bench.j;
  EXPECT_EQ(j.at("version"), 3);
  EXPECT_EQ(j.at("repeat"), 3);
  const json& runs = j.at("runs");
  ASSERT_EQ(runs.size(), 4u);
  const double copy = j.at("machine").at("copy_bytes_per_s"), gemm = j.at("machine").at("gemm_flops_per_s");
  ASSERT_GT(copy, 0.0);
  ASSERT_GT(gemm, 0.0);
  double weight_bytes = 0.0;
  for (const json& run : runs) {
    SCOPED_TRACE(run.at("name").get<std::string>());
    expect_mean_sd(run.at("tokens_per_s"), 3);
    const std::int64_t requests = run.at("requests");
    EXPECT_EQ(run.at("tokens").get<std::int64_t>(), requests * 6);
    if (!run.contains("pp_tokens_per_s")) continue;  // a reference run
    EXPECT_EQ(run.at("prompt_tokens").get<std::int64_t>(), requests * 8);
    EXPECT_EQ(run.at("decode_tokens").get<std::int64_t>(), requests * 5);
    expect_mean_sd(run.at("pp_tokens_per_s"), 3);
    expect_mean_sd(run.at("tg_tokens_per_s"), 3);

    const json& b = run.at("per_token_us");
    double sum = 0.0;
    for (const char* part : {"projections", "attention", "kv_write", "policy", "page_manager", "other_decode",
                             "scheduler"}) {
      EXPECT_GE(b.at(part).get<double>(), -1e-6) << part;
      sum += b.at(part).get<double>();
    }
    EXPECT_GT(b.at("projections").get<double>(), 0.0);
    EXPECT_GT(b.at("attention").get<double>(), 0.0);
    EXPECT_GT(b.at("kv_write").get<double>(), 0.0);
    EXPECT_NEAR(b.at("total").get<double>(), sum, 1e-9 * sum);
    // The total per decoded token is the generation time over the decode tokens: 1 / tg, per round.
    double inverse_tg = 0.0;
    for (double tg : values_of(run.at("tg_tokens_per_s"))) inverse_tg += 1e6 / tg / 3.0;
    EXPECT_NEAR(b.at("total").get<double>(), inverse_tg, 1e-6 * inverse_tg);

    const json& roof = run.at("roofline");
    EXPECT_DOUBLE_EQ(roof.at("batch").get<double>(), requests == 5 ? 5.0 : 1.0);
    const double bytes = roof.at("weight_bytes").get<double>() + roof.at("kv_bytes").get<double>();
    EXPECT_NEAR(roof.at("bandwidth_s").get<double>(), bytes / copy, 1e-12);
    EXPECT_NEAR(roof.at("compute_s").get<double>(), roof.at("flops").get<double>() / gemm, 1e-12);
    const double predicted = std::max(roof.at("bandwidth_s").get<double>(), roof.at("compute_s").get<double>());
    EXPECT_DOUBLE_EQ(roof.at("predicted_step_s").get<double>(), predicted);
    EXPECT_EQ(roof.at("bound"), roof.at("bandwidth_s").get<double>() >= roof.at("compute_s").get<double>()
                                    ? "bandwidth-bound"
                                    : "compute-bound");
    EXPECT_NEAR(roof.at("predicted_tokens_per_s").get<double>(), roof.at("batch").get<double>() / predicted,
                1e-9 * roof.at("predicted_tokens_per_s").get<double>());
    EXPECT_NEAR(roof.at("achieved_fraction").get<double>(),
                run.at("tg_tokens_per_s").at("mean").get<double>() / roof.at("predicted_tokens_per_s").get<double>(),
                1e-9);
    EXPECT_GT(roof.at("kv_bytes").get<double>(), 0.0);
    if (weight_bytes == 0.0) weight_bytes = roof.at("weight_bytes");
    EXPECT_EQ(roof.at("weight_bytes").get<double>(), weight_bytes) << "the same weights at every batch";
  }
  // kvcheck-tiny in float32: 4 bytes a weight.
  EXPECT_EQ(weight_bytes, 4.0 * kTinyWeights);
  // Five requests store five times the KV of one at the same point of their decode.
  EXPECT_NEAR(runs[3].at("roofline").at("kv_bytes").get<double>(), 5.0 * runs[2].at("roofline").at("kv_bytes").get<double>(),
              1e-9 * runs[3].at("roofline").at("kv_bytes").get<double>());
}

// --dummy-weights --shape run the engine benchmark on a named shape's seeded bf16 weights (it used
// to ignore both and bench the embedded model); --shape alone is refused.
TEST(BenchEngineCli, DummyWeightsOfAShape) {
  const EngineBench bench =
      bench_engine("--dummy-weights --shape kvcheck-tiny --prompt-tokens 8 --new-tokens 4 --batch 2 --threads 1");
  ASSERT_EQ(bench.run.code, 0) << bench.run.output;
  EXPECT_NE(bench.run.output.find("dummy weights of kvcheck-tiny"), std::string::npos) << bench.run.output;
  EXPECT_EQ(bench.j.at("model"), "dummy weights of kvcheck-tiny");
  // The same weights as the embedded model's, kept in bf16: 2 bytes each.
  EXPECT_EQ(bench.j.at("runs").at(3).at("roofline").at("weight_bytes").get<double>(), 2.0 * kTinyWeights);
  const testing::CliRun shape_only = testing::run_kvcheck("bench --engine --shape kvcheck-tiny");
  EXPECT_EQ(shape_only.code, 2) << shape_only.output;
  EXPECT_NE(shape_only.output.find("--shape: needs --dummy-weights"), std::string::npos) << shape_only.output;
}

TEST(BenchEngineCli, RepeatMustBePositive) {
  const testing::CliRun r = testing::run_kvcheck("bench --engine --repeat 0");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--repeat"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvcheck
