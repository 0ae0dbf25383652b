// kvcheck report --long (cli/report_long.h): the bins hold the decode positions of the windows of
// their length, a bin measures what the plain report measures on the same window, budgets follow
// the context, the retrieval grid has its cells, bad sizes exit 2 naming the flag.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::run_kvcheck;
using testing::shell_quote;

json read_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  return json::parse(in);
}

const json& row_named(const json& report, const std::string& policy) {
  for (const json& r : report.at("rows")) {
    if (r.at("policy") == policy) return r;
  }
  throw std::runtime_error("no row " + policy);
}

// Retrieval items of the embedded model's lengths (128 and 256 tokens) with depths: the short
// set's first passkey items of each length, labelled depth 0 and 100.
std::filesystem::path write_depth_items(const std::filesystem::path& dir) {
  std::ifstream in(testing::source_path("datasets/eval/retrieval.jsonl"));
  const std::filesystem::path out = dir / "items.jsonl";
  std::ofstream o(out);
  std::map<std::int64_t, int> taken;
  for (std::string line; std::getline(in, line);) {
    json it = json::parse(line);
    const std::int64_t bucket = it.at("length_bucket").get<std::int64_t>();
    if ((bucket != 128 && bucket != 256) || taken[bucket] == 2) continue;
    it["depth"] = taken[bucket]++ == 0 ? 0 : 100;
    o << it.dump() << "\n";
  }
  return out;
}

TEST(ReportLongCli, BinsHoldEachLengthsWindowsAndMatchThePlainReport) {
  testing::TempDir tmp;
  const std::filesystem::path items = write_depth_items(tmp.path());
  const std::string common = fmt::format("--heldout {} --threads 2 --quiet",
                                         shell_quote(testing::source_path("datasets/eval/heldout.jsonl")));
  const testing::CliRun run = run_kvcheck(fmt::format(
      "report --long --lengths 128,256 --depths 0,100 --prompts 1 --max-new-tokens 16 --policies full-fp32,int4,h2o "
      "--fractions 1/4 --retrieval {} --out {} {}",
      shell_quote(items), shell_quote(tmp.path() / "long"), common));
  ASSERT_EQ(run.code, 0) << run.output;
  const json report = read_json(tmp.path() / "long" / "report.json");
  EXPECT_EQ(report.at("mode"), "long");
  ASSERT_EQ(report.at("position_bins").size(), 2u);
  EXPECT_EQ(report.at("position_bins")[0].at("label"), "0-128");
  EXPECT_EQ(report.at("position_bins")[1].at("label"), "128-256");
  EXPECT_EQ(report.at("settings").at("retrieval_items"), 4);
  ASSERT_EQ(report.at("rows").size(), 3u);

  for (const json& r : report.at("rows")) {
    const std::string name = r.at("policy").get<std::string>();
    ASSERT_EQ(r.at("by_position").size(), 2u) << name;
    for (const json& b : r.at("by_position")) EXPECT_EQ(b.at("tokens"), 16) << name;
    EXPECT_EQ(r.at("retrieval_grid").at("items"), json::parse("[[1,1],[1,1]]")) << name;
    EXPECT_EQ(r.at("oracle_violations"), 0) << name;
    EXPECT_GT(r.at("oracle_checks").get<std::int64_t>(), 0) << name;
  }
  // Full precision is the reference, and agrees with itself on every item.
  const json& full = row_named(report, "full-fp32");
  EXPECT_LT(full.at("kl_mean").get<double>(), 1e-9);
  EXPECT_EQ(full.at("top1_agreement"), 1.0);
  EXPECT_EQ(full.at("retrieval_agreement"), 1.0);
  // A budget is its fraction of each length: 32 tokens at 128, 64 at 256.
  const json& h2o = row_named(report, "h2o@1/4");
  EXPECT_EQ(h2o.at("budget_fraction"), "1/4");
  EXPECT_NE(h2o.at("by_position")[0].at("spec").get<std::string>().find("budget=32"), std::string::npos);
  EXPECT_NE(h2o.at("by_position")[1].at("spec").get<std::string>().find("budget=64"), std::string::npos);
  EXPECT_LT(h2o.at("by_position")[0].at("kv_bytes_vs_fp16").get<double>(), 0.5);

  // The first bin is the first document's first 128 tokens, the last 16 decoded: what the plain
  // report measures with 112 + 16 tokens of one window (the same cache bits; the prefill's last
  // row through another lm_head path at most moves the last bits).
  const testing::CliRun plain = run_kvcheck(fmt::format(
      "report --prompts 1 --prompt-tokens 112 --max-new-tokens 16 --policies int4 --retrieval-items 0 --oracle-prompts 0 "
      "--out {} {}",
      shell_quote(tmp.path() / "plain"), common));
  ASSERT_EQ(plain.code, 0) << plain.output;
  const json plain_row = read_json(tmp.path() / "plain" / "report.json").at("rows").at(0);
  const json& bin = row_named(report, "int4").at("by_position")[0];
  const double kl = plain_row.at("kl_mean").get<double>();
  EXPECT_NEAR(bin.at("kl_mean").get<double>(), kl, 1e-6 * kl);
  EXPECT_EQ(bin.at("top1_agreement"), plain_row.at("top1_agreement"));
}

TEST(ReportLongCli, BadSizesExit2NamingTheFlag) {
  testing::TempDir tmp;
  const std::string out = fmt::format("--out {} --quiet", shell_quote(tmp.path()));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"report --long --fractions 3/2", "--fractions"},
      {"report --long --fractions one-half", "--fractions"},
      {"report --long --budgets 32", "--budgets"},
      {"report --lengths 128", "--lengths"},
      {"report --long --depths 120", "--depths"},
      {"report --long --lengths 1024", "max_position_embeddings"},
      {"report --long --lengths 32 --max-new-tokens 32", "--lengths"},
  };
  for (const auto& [args, named] : cases) {
    const testing::CliRun run = run_kvcheck(args + " " + out);
    EXPECT_EQ(run.code, 2) << args << "\n" << run.output;
    EXPECT_NE(run.output.find(named), std::string::npos) << args << "\n" << run.output;
  }
}

}  // namespace
}  // namespace kvcheck
