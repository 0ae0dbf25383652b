// kvcheck report as the test gate runs it: the quick report against the committed baseline
// (datasets/baselines/report-quick-kvcheck-tiny.json) passes, and its outputs hold what the README
// says; the reference comes from the cache on a rerun; bad input exits 2 naming it.
#include <gtest/gtest.h>

#include <string>

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
    for (const char* key : {"kv_bytes_vs_fp16", "kl_mean", "kl_stderr", "kl_p999", "kl_p99", "kl_p95", "kl_p90",
                            "kl_p50", "kl_max", "top1_agreement", "rms_delta_p", "perplexity_ratio", "wall_s"}) {
      ASSERT_TRUE(row.contains(key) && row.at(key).is_number()) << row.at("policy") << " " << key;
    }
    EXPECT_GT(row.at("oracle_checks").get<std::int64_t>(), 0) << row.at("policy");
    EXPECT_EQ(row.at("oracle_violations"), 0) << row.at("policy");
    EXPECT_LE(row.at("kl_p50").get<double>(), row.at("kl_p99").get<double>());
    EXPECT_LE(row.at("kl_p99").get<double>(), row.at("kl_max").get<double>());
  }
  const std::string html = testing::read_file(dir / "r" / "report.html");
  for (const char* fetch : {"src=", "href=", "<link", "<script", "url("}) {
    EXPECT_EQ(html.find(fetch), std::string::npos) << "self-contained: nothing fetched (" << fetch << ")";
  }
  EXPECT_NE(html.find("<svg"), html.rfind("<svg")) << "two plots";
  EXPECT_NE(html.find("Pareto front"), std::string::npos);
  EXPECT_NE(testing::read_file(dir / "r" / "report.md").find("| `leankv:"), std::string::npos);
}

TEST(ReportCli, RerunReadsTheReferenceFromTheCache) {
  testing::TempDir dir;
  const std::string args = "report --quick --quiet --policies full-fp16 --out " + shell_quote(dir / "r");
  ASSERT_EQ(run_kvcheck(args).code, 0);
  ASSERT_EQ(run_kvcheck(args).code, 0);
  const json j = json::parse(testing::read_file(dir / "r" / "report.json"));
  EXPECT_EQ(j.at("reference").at("cached"), true);
  EXPECT_LT(j.at("rows")[0].at("kl_mean").get<double>(), 1e-5);
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
