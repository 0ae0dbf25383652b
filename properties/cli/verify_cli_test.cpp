// kvcheck verify and kvcheck generate --engine optimized on the embedded model, as a user runs
// them: the JSON holds the keys CI gates read, full-fp32 reproduces the reference's greedy tokens
// with float-level logits, full-fp16 stays within the KL and top-1 bars on the held-out text
// (a reduced version of the acceptance runs), and bad flags exit 2 naming them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/device.h"
#include "optimized/kv_policy.h"
#include "oracles/eval_data.h"
#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::run_kvcheck;
using testing::TempDir;

json read_json_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

TEST(VerifyCli, FullFp32MatchesTheReferenceOnTheEmbeddedModel) {
  TempDir dir;
  const auto out = dir / "verify.json";
  const auto run = run_kvcheck("verify --policy full-fp32 --prompts 6 --prompt-tokens 48 --max-new-tokens 48 --json " +
                               testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const json j = read_json_file(out);
  for (const char* key : {"prompts", "greedy_match_fraction", "logits_nmse_max", "kl_mean", "top1_agreement"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["prompts"], 6);
  EXPECT_EQ(j["positions"], 6 * 49);
  EXPECT_EQ(j["greedy_match_fraction"], 1.0);
  EXPECT_LT(j["logits_nmse_max"].get<double>(), 1e-9);
  EXPECT_EQ(j["top1_agreement"], 1.0);
  for (const json& p : j["per_prompt"]) EXPECT_EQ(p["first_divergence"], -1);
}

// Qwen3 from make-model (q_norm / k_norm, GQA, tied, bf16, head_dim 32 x 4 heads over hidden
// 64): the engine's full-fp32 reproduces the reference's greedy tokens with float-level logits.
TEST(VerifyCli, FullFp32MatchesTheReferenceOnAQwen3Model) {
  TempDir dir;
  const auto model = dir / "qwen3";
  const auto made = run_kvcheck("make-model --random --family qwen3 --layers 2 --hidden 64 --heads 4 --kv-heads 2 "
                                "--head-dim 32 --tie --dtype bf16 --vocab 256 --max-positions 256 --seed 4 --out " +
                                testing::shell_quote(model));
  ASSERT_EQ(made.code, 0) << made.output;
  const json config = read_json_file(model / "config.json");
  EXPECT_EQ(config["model_type"], "qwen3");
  EXPECT_EQ(config["head_dim"], 32);
  const auto out = dir / "verify.json";
  const auto run = run_kvcheck("verify --model " + testing::shell_quote(model) +
                               " --policy full-fp32 --prompts 3 --prompt-tokens 40 --max-new-tokens 32 --json " +
                               testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const json j = read_json_file(out);
  EXPECT_EQ(j["prompts"], 3);
  EXPECT_EQ(j["greedy_match_fraction"], 1.0);
  EXPECT_LT(j["logits_nmse_max"].get<double>(), 1e-9);
  for (const json& p : j["per_prompt"]) EXPECT_EQ(p["first_divergence"], -1);
}

TEST(VerifyCli, FullFp16StaysWithinTheBarsOnHeldOutText) {
  TempDir dir;
  const auto out = dir / "verify.json";
  const auto run = run_kvcheck("verify --policy full-fp16 --feed text --prompts 6 --prompt-tokens 32 "
                               "--max-new-tokens 96 --json " + testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const json j = read_json_file(out);
  EXPECT_LT(j["kl_mean"].get<double>(), 1e-4);
  EXPECT_GE(j["top1_agreement"].get<double>(), 0.995);
  EXPECT_GT(j["logits_nmse_max"].get<double>(), 0.0) << "fp16 keys and values cannot be exact";
}

// --feed text decodes nothing greedily: no greedy match fraction on the console or in the JSON
// (readers go by its absence), and the tokens actually fed are counted per prompt and in all.
TEST(VerifyCli, FeedTextCountsTheTokensItFeedsAndHasNoGreedyMatch) {
  TempDir dir;
  const auto out = dir / "verify.json";
  const auto run = run_kvcheck("verify --feed text --prompts 2 --prompt-tokens 32 --max-new-tokens 16 --json " +
                               testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_EQ(run.output.find("greedy match"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("fed 32 tokens in all after the prompts (each prompt's own continuation"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("prompt   0: fed 16 tokens"), std::string::npos) << run.output;
  const json j = read_json_file(out);
  EXPECT_FALSE(j.contains("greedy_match_fraction")) << j.dump();
  EXPECT_EQ(j["fed_tokens"], 32);
  EXPECT_EQ(j["positions"], 2 * 17);  // each prompt's last row and its 16 fed tokens' rows
  for (const json& p : j["per_prompt"]) EXPECT_EQ(p["fed_tokens"], 16);
}

// A greedy continuation stops at max_position_embeddings: verify feeds and reports what the
// reference actually produced (8 tokens after 8-token prompts on a 16-position model), not the
// --max-new-tokens it was asked for; greedy feeding keeps the greedy match fraction.
TEST(VerifyCli, GreedyFeedCountsTheTokensTheReferenceProduced) {
  TempDir dir;
  ASSERT_EQ(run_kvcheck("make-model --random --layers 1 --hidden 32 --heads 2 --kv-heads 1 --vocab 64 --max-positions 16 "
                        "--seed 4 --out " + testing::shell_quote(dir / "m"))
                .code,
            0);
  const auto out = dir / "verify.json";
  const auto run = run_kvcheck("verify --model " + testing::shell_quote(dir / "m") + " --prompts 2 --prompt-tokens 8 "
                               "--max-new-tokens 16 --json " + testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_NE(run.output.find("fed 16 tokens in all after the prompts (the reference's greedy continuations)"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("greedy match fraction 1.0000"), std::string::npos) << run.output;
  const json j = read_json_file(out);
  EXPECT_EQ(j["fed_tokens"], 16);
  for (const json& p : j["per_prompt"]) EXPECT_EQ(p["fed_tokens"], 8);
  EXPECT_EQ(j["greedy_match_fraction"], 1.0);
  EXPECT_EQ(j["datasets"], json::object()) << "random-id prompts read no data file";
}

TEST(VerifyCli, Int4IsVisiblyWorseThanInt8) {
  TempDir dir;
  double kl[2];
  int i = 0;
  for (const char* policy : {"int8", "int4"}) {
    const auto out = dir / (std::string(policy) + ".json");
    const auto run = run_kvcheck(std::string("verify --feed text --prompts 4 --prompt-tokens 32 --max-new-tokens 64 "
                                             "--policy ") + policy + " --json " + testing::shell_quote(out));
    ASSERT_EQ(run.code, 0) << run.output;
    kl[i++] = read_json_file(out)["kl_mean"].get<double>();
  }
  EXPECT_GT(kl[1], 10 * kl[0]);
}

// Every registered policy, with its default parameters, on prompts long enough for the default
// budgets to evict: the per-step oracle checks every decode step, layer and kv head.
TEST(VerifyCli, PerStepOracleHoldsForEveryRegisteredPolicy) {
  TempDir dir;
  std::vector<std::string> specs = policy_names();
  // The residual policies' defaults (n_r = 128) never flush in 32 steps: smaller residuals do,
  // several times, with groups of 16 and 32 and MiniKV's pyramid.
  for (const char* s : {"kivi2:residual=32", "kivi4:group=16,residual=16", "minikv:budget=40,residual=16",
                        "minikv:budget=48,pyramid=4,residual=32", "fp8:scale=calibrated", "fp8:scale=page",
                        "quest:pages=2"}) {
    specs.emplace_back(s);
  }
  int n = 0;
  for (const std::string& policy : specs) {
    const auto out = dir / (std::to_string(n++) + ".json");
    // fp8:scale=page encodes a page once it is full: pages of 28 tokens fill several times. Quest
    // with 2 of them read of the context's 5 or more leaves pages out.
    const bool small_pages = policy == "fp8:scale=page" || policy == "quest:pages=2";
    const std::string pages = small_pages ? " --page-bytes 2048" : "";
    const auto run = run_kvcheck("verify --verify-each-step --policy " + testing::shell_quote(policy) + pages +
                                 " --prompts 3 --prompt-tokens 96 --max-new-tokens 32 --json " + testing::shell_quote(out));
    ASSERT_EQ(run.code, 0) << policy << "\n" << run.output;
    const json j = read_json_file(out);
    const json& o = j["oracle"];
    EXPECT_EQ(o["oracle_checks"], 3 * 32 * 4 * 2) << policy;  // prompts x steps x layers x kv heads
    EXPECT_EQ(o["oracle_violations"], 0) << policy;
    EXPECT_LE(o["bound_use_max"].get<double>(), 1.0) << policy;
    if (make_policy(policy)->evicts() || policy == "quest:pages=2") {
      EXPECT_GT(o["pruned_mass_max"].get<double>(), 0.0) << policy << ": nothing was evicted, the test is vacuous";
    } else {
      EXPECT_LT(o["pruned_mass_max"].get<double>(), 1e-12) << policy;
    }
  }
}

// KV bytes read per decode step: every held byte for a policy that reads every page; Quest reads
// fewer bytes than it holds while it leaves pages out (and fewer than full-fp16 holds), and
// exactly what it holds once K covers every page.
TEST(VerifyCli, SweepReportsKvBytesReadPerDecodeStep) {
  TempDir dir;
  const auto out = dir / "sweep.json";
  const auto run = run_kvcheck("verify --sweep --sweep-policies full-fp16,h2o --sweep-budgets 40 "
                               "--sweep-specs 'quest:pages=1;quest:pages=64' --page-bytes 2048 "
                               "--prompts 2 --prompt-tokens 48 --max-new-tokens 32 --sweep-retrieval 0 --json " +
                               testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const json j = read_json_file(out);
  std::map<std::string, json> rows;
  for (const json& r : j["rows"]) rows[r["policy"].get<std::string>()] = r;
  ASSERT_TRUE(rows.contains("full-fp16") && rows.contains("quest:pages=1") && rows.contains("quest:pages=64")) << j.dump();
  EXPECT_EQ(rows["full-fp16"]["kv_bytes_read_vs_fp16"], 1.0);
  for (const auto& [name, r] : rows) {
    if (name.starts_with("quest")) continue;
    EXPECT_EQ(r["kv_bytes_read_vs_fp16"], r["kv_bytes_vs_fp16"]) << name;
  }
  const json& few = rows["quest:pages=1"];
  const json& all = rows["quest:pages=64"];
  // Quest holds every token in fp16 and 2·d fp16 of key range per page: a little over full-fp16.
  EXPECT_GT(few["kv_bytes_vs_fp16"].get<double>(), 1.0);
  EXPECT_EQ(few["kv_bytes_vs_fp16"], all["kv_bytes_vs_fp16"]);
  EXPECT_LT(few["kv_bytes_read_vs_fp16"].get<double>(), 0.5);
  EXPECT_EQ(all["kv_bytes_read_vs_fp16"], all["kv_bytes_vs_fp16"]);
  // Reading every page, Quest attends to what full-fp16 does: the same distributions.
  EXPECT_NEAR(all["kl_mean"].get<double>(), rows["full-fp16"]["kl_mean"].get<double>(), 1e-9);
}

// A reduced sweep: the bytes column is exact for policies whose holdings are known, the exact
// configuration reproduces the reference, and its retrieval accuracy is the reference's on the
// same items (kvcheck eval scores them the same way).
TEST(VerifyCli, SweepReportsBytesAccuracyAndRetrievalPerConfiguration) {
  TempDir dir;
  const auto out = dir / "sweep.json";
  const auto run = run_kvcheck("verify --sweep --sweep-policies full-fp32,full-fp16,streaming --sweep-budgets 40 "
                               "--prompts 2 --prompt-tokens 48 --max-new-tokens 32 --sweep-retrieval 6 --json " +
                               testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const json j = read_json_file(out);
  EXPECT_EQ(j["format"], "kvcheck-sweep");
  ASSERT_EQ(j["rows"].size(), 3u);
  const json& fp32 = j["rows"][0];
  const json& fp16 = j["rows"][1];
  const json& streaming = j["rows"][2];
  EXPECT_EQ(fp32["policy"], "full-fp32");
  EXPECT_TRUE(fp32["budget"].is_null());
  EXPECT_EQ(fp32["kv_bytes_vs_fp16"], 2.0);
  EXPECT_EQ(fp16["kv_bytes_vs_fp16"], 1.0);
  EXPECT_EQ(streaming["policy"], "streaming:sinks=4,window=36");
  EXPECT_EQ(streaming["budget"], 40);
  EXPECT_DOUBLE_EQ(streaming["kv_bytes_vs_fp16"].get<double>(), 40.0 / 80.0);  // 40 of 48 + 32 tokens
  EXPECT_LT(fp32["kl_mean"].get<double>(), 1e-9);
  EXPECT_EQ(fp32["top1_agreement"], 1.0);
  EXPECT_NEAR(fp32["perplexity"].get<double>() / j["reference_perplexity"].get<double>(), 1.0, 1e-6);
  EXPECT_GT(streaming["kl_mean"].get<double>(), fp16["kl_mean"].get<double>());
  EXPECT_EQ(fp32["retrieval_items"], 6);
  const auto eval = run_kvcheck("eval --task retrieval --limit 6 --quiet --json " + testing::shell_quote(dir / "eval.json"));
  ASSERT_EQ(eval.code, 0) << eval.output;
  EXPECT_EQ(fp32["retrieval_accuracy"], read_json_file(dir / "eval.json")["retrieval_accuracy"]);
}

// XKV's averaged allocation: one budget per layer, summing to the total, each the floor or the
// ceiling of the per-request allocations' mean, printed as a spec that the per-step oracle then
// passes.
TEST(VerifyCli, XkvCalibrationPrintsAnAveragedSpecThatRuns) {
  TempDir dir;
  const auto out = dir / "calibration.json";
  const auto run = run_kvcheck("verify --xkv-calibrate 3 --policy xkv:budget=24,window=4 --prompts 2 "
                               "--prompt-tokens 48 --max-new-tokens 16 --json " + testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const json j = read_json_file(out);
  EXPECT_EQ(j["format"], "kvcheck-xkv-calibration");
  ASSERT_EQ(j["samples"].size(), 3u);
  const auto layers = j["layers"].get<std::vector<std::int64_t>>();
  ASSERT_EQ(layers.size(), 4u);  // the embedded model's layers
  std::vector<std::int64_t> sums(4, 0);
  for (const json& s : j["samples"]) {
    const auto own = s["layers"].get<std::vector<std::int64_t>>();
    ASSERT_EQ(own.size(), 4u);
    EXPECT_EQ(std::accumulate(own.begin(), own.end(), std::int64_t{0}), 4 * (24 - 4));
    for (std::size_t l = 0; l < 4; ++l) sums[l] += own[l];
  }
  EXPECT_EQ(std::accumulate(layers.begin(), layers.end(), std::int64_t{0}), 4 * (24 - 4));
  for (std::size_t l = 0; l < 4; ++l) {
    EXPECT_TRUE(layers[l] == sums[l] / 3 || layers[l] == (sums[l] + 2) / 3) << l;
  }
  std::string spec = "xkv:layers=";
  for (std::size_t l = 0; l < 4; ++l) spec += (l ? "/" : "") + std::to_string(layers[l]);
  spec += ",window=4,pool=7";
  EXPECT_EQ(j["spec"], spec);
  EXPECT_NE(run.output.find("policy spec: " + spec), std::string::npos) << run.output;
  const auto check = run_kvcheck("verify --verify-each-step --policy " + spec + " --prompts 2 --prompt-tokens 48 "
                                 "--max-new-tokens 8");
  EXPECT_EQ(check.code, 0) << check.output;
}

// DuoAttention's calibration: ceil(R x 8) retrieval heads, the ones whose answer queries put the
// most attention outside the streaming window, measured on items the sweep does not evaluate; the
// printed spec runs under the per-step oracle.
TEST(VerifyCli, DuoCalibrationPrintsTheHeadsWithTheMostFarAttention) {
  TempDir dir;
  const auto out = dir / "calibration.json";
  const auto run = run_kvcheck("verify --duo-calibrate 4 --duo-rank far-mass --policy duo:retrieval=0.3,sinks=2,recent=16 "
                               "--sweep-retrieval 12 --json " + testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const json j = read_json_file(out);
  EXPECT_EQ(j["format"], "kvcheck-duo-calibration");
  const auto items = j["items"].get<std::vector<std::string>>();
  ASSERT_EQ(items.size(), 4u);
  const std::vector<RetrievalItem> all = load_retrieval(std::filesystem::path(KVCHECK_SOURCE_DIR) / "datasets/eval/retrieval.jsonl");
  for (const RetrievalItem& it : retrieval_subset(all, 12)) {
    EXPECT_EQ(std::find(items.begin(), items.end(), it.id), items.end()) << it.id << " is evaluated by the sweep";
  }
  const auto far = j["far_mass"].get<std::vector<double>>();
  const auto heads = j["heads"].get<std::vector<std::int64_t>>();
  ASSERT_EQ(far.size(), 8u);     // 4 layers x 2 kv heads
  ASSERT_EQ(heads.size(), 3u);   // ceil(0.3 x 8)
  for (std::int64_t h = 0; h < 8; ++h) {
    if (std::find(heads.begin(), heads.end(), h) != heads.end()) continue;
    for (std::int64_t r : heads) EXPECT_GE(far[static_cast<std::size_t>(r)], far[static_cast<std::size_t>(h)]) << r << " vs " << h;
  }
  EXPECT_GT(j["queries"].get<std::int64_t>(), 4);
  const std::string spec = j["spec"];
  EXPECT_EQ(spec, fmt::format("duo:sinks=2,recent=16,heads={}/{}/{}", heads[0], heads[1], heads[2]));
  EXPECT_NE(run.output.find("policy spec: " + spec), std::string::npos) << run.output;
  const auto check = run_kvcheck("verify --verify-each-step --policy " + spec + " --prompts 2 --prompt-tokens 48 "
                                 "--max-new-tokens 8");
  EXPECT_EQ(check.code, 0) << check.output;
  EXPECT_EQ(j["rank"], "far-mass");
  // Ranked by output error (the default): the same items and statistics, the heads of largest output error.
  const auto by_error = run_kvcheck("verify --duo-calibrate 4 --policy "
                                    "duo:retrieval=0.3,sinks=2,recent=16 --sweep-retrieval 12 --json " +
                                    testing::shell_quote(out));
  ASSERT_EQ(by_error.code, 0) << by_error.output;
  const json e = read_json_file(out);
  EXPECT_EQ(e["rank"], "output-error");
  EXPECT_EQ(e["items"], j["items"]);
  EXPECT_EQ(e["far_mass"], j["far_mass"]);
  const auto error = e["output_error"].get<std::vector<double>>();
  const auto error_heads = e["heads"].get<std::vector<std::int64_t>>();
  ASSERT_EQ(error.size(), 8u);
  ASSERT_EQ(error_heads.size(), 3u);
  for (std::int64_t h = 0; h < 8; ++h) {
    EXPECT_GE(error[static_cast<std::size_t>(h)], 0.0);
    if (std::find(error_heads.begin(), error_heads.end(), h) != error_heads.end()) continue;
    for (std::int64_t r : error_heads) EXPECT_GE(error[static_cast<std::size_t>(r)], error[static_cast<std::size_t>(h)]);
  }
}

// With --duo-calibrate the sweep follows each duo budget row with its calibrated row: the same
// sinks and window and ceil(0.25 x 8) = 2 retrieval heads, so the same bytes on the text: in both
// rows two heads hold the whole 64-token context and six hold 4 + 36 (0.719 of full-fp16).
TEST(VerifyCli, SweepAddsDuoCalibratedRows) {
  TempDir dir;
  const auto out = dir / "sweep.json";
  const auto run = run_kvcheck("verify --sweep --sweep-policies duo --sweep-budgets 40 --prompts 2 --prompt-tokens 48 "
                               "--max-new-tokens 16 --sweep-retrieval 6 --duo-calibrate 3 --duo-rank output-error "
                               "--json " + testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const json j = read_json_file(out);
  ASSERT_EQ(j["rows"].size(), 2u);
  const json& uncalibrated = j["rows"][0];
  const json& calibrated = j["rows"][1];
  EXPECT_EQ(uncalibrated["policy"], "duo:retrieval=0.25,sinks=4,recent=36");
  EXPECT_EQ(calibrated["calibrated_from"], uncalibrated["policy"]);
  EXPECT_EQ(calibrated["calibration_items"], 3);
  EXPECT_EQ(calibrated["rank"], "output-error");
  const auto heads = calibrated["heads"].get<std::vector<std::int64_t>>();
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_EQ(calibrated["policy"], fmt::format("duo:sinks=4,recent=36,heads={}/{}", heads[0], heads[1]));
  EXPECT_EQ(calibrated["kv_bytes_vs_fp16"], uncalibrated["kv_bytes_vs_fp16"]);
  EXPECT_NEAR(calibrated["kv_bytes_vs_fp16"].get<double>(), (2 * 64 + 6 * 40) / (8 * 64.0), 1e-9);
}

// The derived sweep rows: each dynamic leankv row is followed by a static one holding its mean
// tokens per head (so the same bytes up to rounding), and each xkv budget row by its averaged
// allocation, which holds the same tokens per head as the per-request row.
TEST(VerifyCli, SweepAddsLeanKvStaticAndXkvAveragedRows) {
  TempDir dir;
  const auto out = dir / "sweep.json";
  const auto run = run_kvcheck("verify --sweep --sweep-policies xkv,leankv --sweep-budgets 40 --prompts 2 "
                               "--prompt-tokens 96 --max-new-tokens 32 --sweep-retrieval 0 --xkv-calibrate 2 "
                               "--sweep-specs 'leankv:alpha_l=0.5,window=16' --json " + testing::shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const json j = read_json_file(out);
  ASSERT_EQ(j["rows"].size(), 6u);
  const json& xkv = j["rows"][0];
  const json& averaged = j["rows"][1];
  EXPECT_EQ(averaged["averaged_from"], xkv["policy"]);
  EXPECT_EQ(averaged["calibration_prompts"], 2);
  const auto layers = averaged["layers"].get<std::vector<std::int64_t>>();
  EXPECT_EQ(std::accumulate(layers.begin(), layers.end(), std::int64_t{0}), 4 * (40 - 8));
  EXPECT_EQ(averaged["high_tokens_per_head"], xkv["high_tokens_per_head"]);
  EXPECT_EQ(averaged["high_tokens_per_head"], 40 + 32);  // budget + the generated tokens
  EXPECT_EQ(averaged["kv_bytes_vs_fp16"], xkv["kv_bytes_vs_fp16"]);
  for (const auto& [dynamic_at, window] : {std::pair{2u, 64}, std::pair{4u, 16}}) {
    const json& dynamic = j["rows"][dynamic_at];
    const json& fixed = j["rows"][dynamic_at + 1];
    EXPECT_EQ(fixed["static_of"], dynamic["policy"]);
    const auto n_high = std::llround(dynamic["high_tokens_per_head"].get<double>()) - window;
    const auto n_low = std::llround(dynamic["low_tokens_per_head"].get<double>());
    EXPECT_EQ(fixed["policy"], "leankv:static_high=" + std::to_string(n_high) + ",static_low=" +
                                   std::to_string(n_low) + ",window=" + std::to_string(window) +
                                   ",high_k=8,high_v=4,low_k=4,low_v=2");
    // Every head holds exactly the counts, so the means are exact.
    EXPECT_EQ(fixed["high_tokens_per_head"], window + n_high);
    EXPECT_EQ(fixed["low_tokens_per_head"], n_low);
    EXPECT_EQ(fixed["dynamic_kv_bytes_vs_fp16"], dynamic["kv_bytes_vs_fp16"]);
    // Within half a token per tier of bytes: at most a token's fp16 bytes over the 128 context.
    EXPECT_NEAR(fixed["kv_bytes_vs_fp16"].get<double>(), dynamic["kv_bytes_vs_fp16"].get<double>(), 1.0 / 128);
  }
  EXPECT_LT(j["rows"][4]["low_tokens_per_head"].get<double>() + j["rows"][4]["high_tokens_per_head"].get<double>(),
            127.0)
      << "alpha_l 0.5 prunes nothing: the comparison is vacuous";
}

TEST(VerifyCli, BadFlagsExitTwoNamingThem) {
  auto run = run_kvcheck("verify --policy nope");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.output.find("policy 'nope'"), std::string::npos) << run.output;
  if (cuda_device_count() == 0) {  // with a device, --device cuda runs (GPU suite)
    run = run_kvcheck("verify --device cuda");
    EXPECT_EQ(run.code, 2);
    EXPECT_NE(run.output.find("--device cuda"), std::string::npos) << run.output;
  }
  run = run_kvcheck("verify --xkv-calibrate 2 --policy h2o");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.output.find("--xkv-calibrate: policy: needs an xkv spec with a budget"), std::string::npos)
      << run.output;
  run = run_kvcheck("verify --duo-calibrate 2 --policy h2o");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.output.find("--duo-calibrate: policy: needs a duo spec without heads"), std::string::npos)
      << run.output;
  run = run_kvcheck("verify --duo-calibrate 2 --policy duo --sweep-retrieval 360");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.output.find("2 items asked for, 0 of its items are left"), std::string::npos) << run.output;
  run = run_kvcheck("verify --duo-calibrate 2 --duo-rank nope --policy duo");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.output.find("--duo-rank: nope: must be far-mass or output-error"), std::string::npos) << run.output;
  run = run_kvcheck("verify --policy duo:heads=8");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.output.find("policy 'duo': parameter 'heads' names kv head 8, the model has 8"), std::string::npos)
      << run.output;
  run = run_kvcheck("verify --policy duo:heads=1/1");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.output.find("policy 'duo': parameter 'heads' names a kv head twice"), std::string::npos) << run.output;
  run = run_kvcheck("verify --xkv-calibrate 2 --policy xkv:budget=64 --prompt-tokens 32");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.output.find("--xkv-calibrate: --prompt-tokens: 32 prompt tokens"), std::string::npos) << run.output;
  run = run_kvcheck("verify --prompt-tokens 100000");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.output.find("max_position_embeddings"), std::string::npos) << run.output;
}

TEST(GenerateCli, OptimizedEngineGivesTheReferenceTokens) {
  const std::string args = "generate --ids 1,40,77,300,9 --max-new-tokens 24 --ignore-eos";
  const auto ref = run_kvcheck(args);
  const auto opt = run_kvcheck(args + " --engine optimized --policy full-fp32");
  ASSERT_EQ(ref.code, 0) << ref.output;
  ASSERT_EQ(opt.code, 0) << opt.output;
  auto line = [](const std::string& out) {
    const auto a = out.find("generated ids:");
    return out.substr(a, out.find('\n', a) - a);
  };
  EXPECT_EQ(line(opt.output), line(ref.output));
  EXPECT_NE(opt.output.find("engine: optimized"), std::string::npos);
}

}  // namespace
}  // namespace kvcheck
