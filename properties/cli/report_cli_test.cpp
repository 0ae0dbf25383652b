// kvcheck report as the test gate runs it: the quick report against the committed baseline
// (datasets/baselines/report-quick-kvcheck-tiny.json) passes, and its outputs hold what docs/reports.md
// says; the reference comes from the cache on a rerun; bad input exits 2 naming it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "optimized/kv_policy.h"
#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::CliRun;
using testing::run_kvcheck;
using testing::shell_quote;

std::string committed_baseline() {
  return shell_quote(testing::source_path("datasets/baselines/report-quick-kvcheck-tiny.json"));
}

// The quick settings: 2 windows of 64 + 32 tokens on the embedded model (4 layers, 2 kv heads).
constexpr std::int64_t kQuickContext = 96, kQuickSteps = 32;

// A row's memory fields: tokens per layer as its policy holds them, per-head bytes whose mean is
// the row's bytes, fragmentation at every decode step in [0, 1].
void expect_memory_fields_agree(const json& row) {
  const std::string policy = row.at("policy").get<std::string>();
  const auto layers = row.at("tokens_per_layer").get<std::vector<double>>();
  const auto heads = row.at("bytes_vs_fp16_per_head").get<std::vector<std::vector<double>>>();
  const auto frag = row.at("fragmentation_by_step").get<std::vector<double>>();
  ASSERT_EQ(layers.size(), 4u) << policy;
  ASSERT_EQ(heads.size(), 4u) << policy;
  double sum = 0.0;
  for (const auto& l : heads) {
    ASSERT_EQ(l.size(), 2u) << policy;
    for (const double b : l) sum += b;
  }
  EXPECT_NEAR(sum / 8.0, row.at("kv_bytes_vs_fp16").get<double>(), 1e-9) << policy;
  ASSERT_EQ(frag.size(), static_cast<std::size_t>(kQuickSteps)) << policy;
  for (const double f : frag) {
    EXPECT_GE(f, 0.0) << policy;
    EXPECT_LT(f, 1.0) << policy;
  }
  if (policy == "full-fp16") {
    for (const double t : layers) EXPECT_EQ(t, kQuickContext);
  }
  if (policy.starts_with("h2o:budget=") || policy.starts_with("streaming:budget=")) {
    const double budget = row.at("budget").get<double>();
    for (const double t : layers) EXPECT_EQ(t, budget) << policy;
  }
  if (policy.starts_with("pyramidkv:budget=32")) {  // fewer tokens in every later layer
    for (std::size_t l = 1; l < layers.size(); ++l) EXPECT_LT(layers[l], layers[l - 1]) << policy << " layer " << l;
  }
}

// SpvLLM's four strategies make H2O's decisions; only their pages differ: no-op never frees one
// (its fragmentation never falls and is the largest), free-block frees emptied pages, sparse-copy
// packs the live tokens (never more fragmented than free-block), slot-reuse fills the holes.
void expect_spvllm_strategies_differ_in_pages_only(const json& report) {
  const json& sp = report.at("spvllm_strategies");
  ASSERT_TRUE(sp.is_object());
  EXPECT_EQ(sp.at("budget"), 64);
  std::map<std::string, std::vector<double>> frag;
  std::vector<double> kl;
  for (const json& st : sp.at("strategies")) {
    frag[st.at("strategy").get<std::string>()] = st.at("fragmentation_by_step").get<std::vector<double>>();
    kl.push_back(st.at("kl_mean").get<double>());
  }
  ASSERT_EQ(frag.size(), 4u);
  for (const double k : kl) EXPECT_NEAR(k, kl[0], 1e-3 * kl[0]);
  const std::vector<double>& no_op = frag.at("no-op");
  ASSERT_EQ(no_op.size(), static_cast<std::size_t>(kQuickSteps));
  for (std::size_t t = 0; t < no_op.size(); ++t) {
    if (t > 0) {
      EXPECT_GE(no_op[t], no_op[t - 1]) << "step " << t;
    }
    EXPECT_LE(frag.at("free-block")[t], no_op[t]) << "step " << t;
    EXPECT_LE(frag.at("sparse-copy")[t], frag.at("free-block")[t]) << "step " << t;
    // The 64-token prompt fills 4 pages of 16 exactly; each new token takes its victim's slot
    // (slot-reuse) or the live tokens are packed again (sparse-copy).
    EXPECT_EQ(frag.at("slot-reuse")[t], 0.0) << "step " << t;
    EXPECT_EQ(frag.at("sparse-copy")[t], 0.0) << "step " << t;
  }
  // No-op appends after the last live slot: a fifth page at the first step, a sixth at the 17th.
  EXPECT_NEAR(no_op.front(), 1.0 - 64.0 / 80.0, 1e-12);
  EXPECT_NEAR(no_op.back(), 1.0 - 64.0 / 96.0, 1e-12);
}

// The reference's attention statistics: one entry per (layer, kv head), layer major, over the
// continuation's queries only (2 prompts x 32 positions, each seeing 65 .. 96 keys), each a mean
// of per-query values that lie in [0, 1].
void expect_reference_attention_over_the_continuation(const json& report) {
  const json& att = report.at("reference").at("attention");
  ASSERT_EQ(att.size(), 8u);
  for (std::size_t i = 0; i < att.size(); ++i) {
    const json& h = att[i];
    EXPECT_EQ(h.at("layer"), static_cast<std::int64_t>(i / 2));
    EXPECT_EQ(h.at("kv_head"), static_cast<std::int64_t>(i % 2));
    EXPECT_EQ(h.at("samples"), 2 * kQuickSteps) << i;
    for (const char* key : {"first_token_mass", "top10_share", "frac_for_95"}) {
      EXPECT_GE(h.at(key).get<double>(), 0.0) << i << " " << key;
      EXPECT_LE(h.at(key).get<double>(), 1.0) << i << " " << key;
    }
    // The 10% largest probabilities hold at least 10% of the mass.
    EXPECT_GE(h.at("top10_share").get<double>(), 0.1) << i;
    // tokens_for_95 / frac_for_95 is a weighted mean of the context lengths the queries saw.
    const double seen = h.at("tokens_for_95").get<double>() / h.at("frac_for_95").get<double>();
    EXPECT_GE(seen, static_cast<double>(kQuickContext - kQuickSteps + 1) - 1e-9) << i;
    EXPECT_LE(seen, static_cast<double>(kQuickContext) + 1e-9) << i;
  }
}

TEST(ReportCli, QuickReportMatchesTheCommittedBaseline) {
  testing::TempDir dir;
  const CliRun r = run_kvcheck("report --quick --quiet --out " + shell_quote(dir / "r") + " --baseline " + committed_baseline());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("no regression against"), std::string::npos) << r.output;
  const json j = json::parse(testing::read_file(dir / "r" / "report.json"));
  EXPECT_EQ(j.at("format"), "kvcheck-report");
  EXPECT_EQ(j.at("version"), 1);
  // Every registered policy once, the evicting ones at each quick budget.
  std::size_t want = 0;
  for (const std::string& name : policy_names()) want += policy_spec_at_budget(name, 1) ? 2 : 1;
  ASSERT_EQ(j.at("rows").size(), want);
  for (const json& row : j.at("rows")) {
    for (const char* key : {"kv_bytes_vs_fp16", "kv_bytes_read_vs_fp16", "kl_mean", "kl_stderr", "kl_p999", "kl_p99", "kl_p95", "kl_p90",
                            "kl_p50", "kl_max", "top1_agreement", "rms_delta_p", "perplexity_ratio", "wall_s"}) {
      ASSERT_TRUE(row.contains(key) && row.at(key).is_number()) << row.at("policy") << " " << key;
    }
    EXPECT_GT(row.at("oracle_checks").get<std::int64_t>(), 0) << row.at("policy");
    EXPECT_EQ(row.at("oracle_violations"), 0) << row.at("policy");
    EXPECT_LE(row.at("kl_p50").get<double>(), row.at("kl_p99").get<double>());
    EXPECT_LE(row.at("kl_p99").get<double>(), row.at("kl_max").get<double>());
    expect_memory_fields_agree(row);
  }
  expect_spvllm_strategies_differ_in_pages_only(j);
  expect_reference_attention_over_the_continuation(j);
  const std::string html = testing::read_file(dir / "r" / "report.html");
  for (const char* fetch : {"src=", "href=", "<link", "<script", "url("}) {
    EXPECT_EQ(html.find(fetch), std::string::npos) << "self-contained: nothing fetched (" << fetch << ")";
  }
  std::size_t plots = 0;
  for (std::size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++plots;
  EXPECT_EQ(plots, 5u) << "bytes vs KL, bytes vs retrieval, bytes read vs KL, per-layer budgets, fragmentation over time";
  EXPECT_NE(html.find("Pareto front"), std::string::npos);
  for (const char* section : {"KV bytes read per decode step against KL divergence", "Per-layer budgets (XKV, PyramidKV)", "<title>pyramidkv budget 32</title>", "<title>xkv budget 64</title>",
                              "Reference attention structure", "share of the context holding 95% of the mass",
                              "Per-head memory (LeanKV, Ada-KV, DuoAttention)", "<h3><code>leankv:", "<h3><code>adakv:", "<h3><code>duo:", "Fragmentation over time", "<title>no-op</title>",
                              "<title>slot-reuse</title>"}) {
    EXPECT_NE(html.find(section), std::string::npos) << section;
  }
  const std::string md = testing::read_file(dir / "r" / "report.md");
  EXPECT_NE(md.find("| `leankv:"), std::string::npos);
  EXPECT_NE(md.find("Reference attention over the continuation: the most concentrated kv head"), std::string::npos) << md;
}

TEST(ReportCli, RerunReadsTheReferenceFromTheCache) {
  testing::TempDir dir;
  const std::string args = "report --quick --quiet --policies full-fp16 --out " + shell_quote(dir / "r");
  ASSERT_EQ(run_kvcheck(args).code, 0);
  const json first = json::parse(testing::read_file(dir / "r" / "report.json"));
  EXPECT_EQ(first.at("reference").at("cached"), false);
  ASSERT_EQ(run_kvcheck(args).code, 0);
  const json j = json::parse(testing::read_file(dir / "r" / "report.json"));
  EXPECT_EQ(j.at("reference").at("cached"), true);
  EXPECT_EQ(j.at("reference").at("perplexity"), first.at("reference").at("perplexity"));
  EXPECT_EQ(j.at("reference").at("attention"), first.at("reference").at("attention"));
  EXPECT_EQ(j.at("reference").at("attention").size(), 8u);
  EXPECT_LT(j.at("rows")[0].at("kl_mean").get<double>(), 1e-5);
}

TEST(ReportCli, AnUnwritableCacheWarnsAndTheReportStillRuns) {
  testing::TempDir dir;
  testing::write_file(dir / "file", "not a directory");
  const CliRun r = run_kvcheck("report --quick --policies full-fp16 --cache " + shell_quote(dir / "file" / "c") + " --out " +
                               shell_quote(dir / "r"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: the reference cache"), std::string::npos) << r.output;
  EXPECT_EQ(json::parse(testing::read_file(dir / "r" / "report.json")).at("reference").at("attention").size(), 8u);
}

// --device reaches the engines the report runs (report.json records it as their device): an
// unknown one is refused by name, not replaced by the CPU.
TEST(ReportCli, UnknownDeviceIsRefusedByName) {
  testing::TempDir dir;
  const CliRun r = run_kvcheck("report --quick --quiet --policies full-fp16 --device nosuch --cache " +
                               shell_quote(dir / "c") + " --out " + shell_quote(dir / "r"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--device 'nosuch'"), std::string::npos) << r.output;
}

TEST(ReportCli, AModelWithoutTokenizerSaysItsPromptsAreRandomIds) {
  // A checkpoint with neither tokenizer.json nor tokenizer.model: the report still runs, on seeded random ids, and says so on the console, in report.md and
  // in report.html, instead of calling them held-out text.
  testing::TempDir dir;
  ASSERT_EQ(run_kvcheck("make-model --random --layers 1 --hidden 32 --heads 2 --kv-heads 1 --vocab 300 --seed 2 --out " +
                        shell_quote(dir / "m"))
                .code,
            0);
  const CliRun r = run_kvcheck("report --quick --quiet --policies full-fp16,int8 --model " + shell_quote(dir / "m") +
                               " --out " + shell_quote(dir / "r"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: " + (dir / "m").string() + " has no tokenizer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("random token ids"), std::string::npos) << r.output;
  const std::string md = testing::read_file(dir / "r" / "report.md");
  const std::string html = testing::read_file(dir / "r" / "report.html");
  for (const std::string* page : {&md, &html}) {
    EXPECT_NE(page->find("2 prompts of seeded random token ids"), std::string::npos) << *page;
    EXPECT_NE(page->find("retrieval skipped"), std::string::npos) << *page;
    EXPECT_EQ(page->find("held-out prompts"), std::string::npos) << *page;
  }
  const json j = json::parse(testing::read_file(dir / "r" / "report.json"));
  EXPECT_TRUE(j.at("reference").at("prompt_source").get<std::string>().starts_with("random ids")) << j.dump();
  EXPECT_EQ(j.at("settings").at("retrieval_items"), 0);
  // The run's wall time and peak RSS, printed and recorded (what a user sizes a real model's run by).
  EXPECT_GT(j.at("run").at("wall_s").get<double>(), 0.0) << j.dump();
  EXPECT_GT(j.at("run").at("peak_rss_bytes").get<std::int64_t>(), std::int64_t{1} << 20) << j.dump();
  EXPECT_NE(r.output.find(" s wall, peak RSS "), std::string::npos) << r.output;
}

TEST(ReportCli, RetrievalItemsLongerThanTheContextAreSkippedAndCounted) {
  // A model of 256 positions: the quick set's 384- and 512-token items cannot run on it. The report
  // runs the items that fit, says how many it skipped and why, and reports only their buckets.
  testing::TempDir dir;
  ASSERT_EQ(run_kvcheck("make-model --random --layers 1 --hidden 32 --heads 2 --kv-heads 1 --max-positions 256 --seed 2 "
                        "--tokenizer " + shell_quote(testing::source_path("datasets/models/kvcheck-tiny/tokenizer.model")) +
                        " --out " + shell_quote(dir / "m"))
                .code,
            0);
  const CliRun r = run_kvcheck("report --quick --quiet --policies full-fp16 --model " + shell_quote(dir / "m") + " --out " +
                               shell_quote(dir / "r"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = json::parse(testing::read_file(dir / "r" / "report.json"));
  const std::int64_t kept = j.at("settings").at("retrieval_items").get<std::int64_t>();
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 12);
  EXPECT_NE(r.output.find(fmt::format("warning: {} of the 12 retrieval items do not fit", 12 - kept)), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("max_position_embeddings 256"), std::string::npos) << r.output;
  const json& row = j.at("rows")[0];
  EXPECT_EQ(row.at("retrieval_items"), kept);
  for (const auto& [bucket, unused] : row.at("retrieval_accuracy_by_length").items()) {
    EXPECT_LE(std::stoll(bucket), 256) << bucket;
  }
}

TEST(ReportCli, BadInputIsNamed) {
  testing::TempDir dir;
  const std::string out = " --out " + shell_quote(dir / "r");
  CliRun r = run_kvcheck("report --quick --update-baseline" + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--update-baseline: needs --baseline"), std::string::npos) << r.output;
  r = run_kvcheck("report --quick --policies no-such-policy" + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no-such-policy"), std::string::npos) << r.output;
  // A spec keeps its own commas: the list is kv-bits:k=8,v=4 then no-such-policy, not a policy 'v=4'.
  r = run_kvcheck("report --quick --policies kv-bits:k=8,v=4,no-such-policy" + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("policy 'no-such-policy': unknown"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("'v=4'"), std::string::npos) << r.output;
  r = run_kvcheck("report --quick --prompts 3 --policies full-fp16 --baseline " + committed_baseline() + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("settings: the baseline was made with other settings"), std::string::npos) << r.output;
  testing::write_file(dir / "bad.json", "{\"format\": \"kvcheck-report-baseline\", \"version\": 1, \"rows\": 3}");
  r = run_kvcheck("report --quick --policies full-fp16 --baseline " + shell_quote(dir / "bad.json") + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.json: rows: must be an array"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvcheck
