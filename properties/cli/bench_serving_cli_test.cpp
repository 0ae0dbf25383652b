// kvcheck bench --workload, run as a user (and the CI smoke) runs it, for a few seconds on the
// embedded model: the JSON schema and the relations that hold whatever the machine's speed —
// every request completes, tokens generated equal tokens asked for, fragmentation in [0, 1], the
// peak within the budget, the baselines first and the ratios against paged-fp16, the roofline's
// prediction the larger of its two times; a configuration that refused or failed a request shows
// no rate. Never a speed.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::CliRun;
using testing::run_kvcheck;
using testing::shell_quote;

void expect_sane(const json& j, std::int64_t requests) {
  EXPECT_EQ(j.at("format"), "kvcheck-bench-serving");
  EXPECT_EQ(j.at("version"), 3);
  const std::int64_t budget = j.at("kv_budget_bytes");
  const double copy = j.at("machine").at("copy_bytes_per_s"), gemm = j.at("machine").at("gemm_flops_per_s");
  EXPECT_EQ(j.at("pool_pages").get<std::int64_t>(), budget / j.at("page_bytes").get<std::int64_t>());
  for (const json& row : j.at("results")) {
    SCOPED_TRACE(row.at("policy").get<std::string>());
    for (const char* key : {"policy", "output_tokens_per_s", "requests_submitted", "requests_completed",
                            "mean_batch_size", "peak_kv_bytes", "fragmentation_p99", "preemptions", "ttft_s",
                            "tpot_s", "itl_s", "ratios_vs_paged_fp16"}) {
      EXPECT_TRUE(row.contains(key)) << key;
    }
    EXPECT_EQ(row.at("requests_submitted"), requests);
    EXPECT_EQ(row.at("requests_completed"), requests) << row.at("errors").dump();
    EXPECT_EQ(row.at("requests_refused"), 0);
    EXPECT_EQ(row.at("all_completed"), true);
    EXPECT_EQ(row.at("partial_output_tokens_per_s"), row.at("output_tokens_per_s"));
    const json& roof = row.at("roofline");
    const double bytes = roof.at("weight_bytes").get<double>() + roof.at("kv_bytes").get<double>();
    EXPECT_NEAR(roof.at("bandwidth_s").get<double>(), bytes / copy, 1e-12);
    EXPECT_NEAR(roof.at("compute_s").get<double>(), roof.at("flops").get<double>() / gemm, 1e-12);
    const double step = std::max(roof.at("bandwidth_s").get<double>(), roof.at("compute_s").get<double>());
    EXPECT_DOUBLE_EQ(roof.at("predicted_step_s").get<double>(), step);
    EXPECT_NEAR(roof.at("predicted_tokens_per_s").get<double>(), row.at("mean_batch_size").get<double>() / step,
                1e-9 * roof.at("predicted_tokens_per_s").get<double>());
    EXPECT_NEAR(roof.at("achieved_fraction").get<double>(),
                row.at("output_tokens_per_s").get<double>() / roof.at("predicted_tokens_per_s").get<double>(), 1e-9);
    EXPECT_NEAR(roof.at("generation_fraction").get<double>(),
                row.at("generation_tokens_per_s").get<double>() / roof.at("predicted_tokens_per_s").get<double>(), 1e-9);
    EXPECT_GT(row.at("generation_tokens_per_s").get<double>(), 0.0);
    EXPECT_EQ(row.at("output_tokens"), row.at("tokens_requested"));
    const double frag = row.at("fragmentation_p99");
    EXPECT_GE(frag, 0.0);
    EXPECT_LE(frag, 1.0);
    EXPECT_LE(row.at("peak_kv_bytes").get<std::int64_t>(), budget);
    EXPECT_GT(row.at("output_tokens_per_s").get<double>(), 0.0);
    EXPECT_GE(row.at("mean_batch_size").get<double>(), 1.0);
    EXPECT_LE(row.at("ttft_s").at("p50").get<double>(), row.at("ttft_s").at("p99").get<double>());
    const json& kinds = row.at("preemptions_by_kind");
    EXPECT_EQ(row.at("preemptions"), kinds.at("recompute").get<std::int64_t>() + kinds.at("swap").get<std::int64_t>());
  }
}

TEST(BenchServingCli, SmokeRunHasTheSchemaAndNothingIsLost) {
  testing::TempDir dir;
  const std::filesystem::path out = dir / "serving.json";
  const CliRun r = run_kvcheck("bench --workload chat --requests 8 --policies int8,h2o --quiet --json " + shell_quote(out));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("paged-fp16"), std::string::npos) << "the table" << r.output;
  const json j = json::parse(testing::read_file(out));
  expect_sane(j, 8);
  const json& rows = j.at("results");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].at("policy"), "contiguous");
  EXPECT_EQ(rows[0].at("contiguous"), true);
  EXPECT_EQ(rows[1].at("policy"), "paged-fp16");
  EXPECT_EQ(rows[2].at("policy"), "int8");
  EXPECT_EQ(rows[3].at("policy"), "h2o");
  EXPECT_DOUBLE_EQ(rows[1].at("ratios_vs_paged_fp16").at("output_tokens_per_s").get<double>(), 1.0);
  // The default budget holds 8 full-context fp16 requests; each reserves only its own prompt +
  // output cap, so the 8 run together and their reservations stay under the budget.
  EXPECT_EQ(rows[0].at("max_batch_seen").get<std::int64_t>(), 8);
  EXPECT_LT(rows[0].at("peak_kv_bytes").get<std::int64_t>(), j.at("kv_budget_bytes").get<std::int64_t>());
  // The default budget: 8 of the workload's longest requests in full fp16, each in pages of 16
  // tokens for every layer and kv head of kvcheck-tiny (4 x 2).
  EXPECT_EQ(j.at("kv_budget_requests"), 8);
  const std::int64_t longest = j.at("workload").at("longest_request_tokens");
  EXPECT_EQ(j.at("kv_budget_bytes").get<std::int64_t>(), 8 * ((longest + 15) / 16) * 8 * j.at("page_bytes").get<std::int64_t>());
  EXPECT_NE(r.output.find(fmt::format("8 of the workload's longest request, {} tokens", longest)), std::string::npos)
      << r.output;
}

// A budget of 64 pages (kvcheck-tiny's 4 layers x 2 kv heads: 8 pages per 16 tokens of a request)
// and four requests, one of 40 + 200 tokens (120 pages): contiguous refuses it at submission,
// paging fails it when it cannot grow even alone. Neither row gives a throughput, a ratio or a
// roofline fraction, and the table says how many were refused and failed; a policy that keeps its
// KV bounded (h2o) serves all four.
TEST(BenchServingCli, RefusedOrFailedRequestsGetNoThroughput) {
  testing::TempDir dir;
  testing::write_file(dir / "w.jsonl", "{\"prompt_tokens\": 12, \"output_tokens\": 4}\n"
                                       "{\"prompt_tokens\": 12, \"output_tokens\": 4}\n"
                                       "{\"prompt_tokens\": 12, \"output_tokens\": 4}\n"
                                       "{\"prompt_tokens\": 40, \"output_tokens\": 200}\n");
  const std::filesystem::path out = dir / "s.json";
  const CliRun r = run_kvcheck("bench --workload-file " + shell_quote(dir / "w.jsonl") +
                               " --policies h2o:budget=32 --kv-budget 147456 --quiet --json " + shell_quote(out));
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = json::parse(testing::read_file(out));
  ASSERT_EQ(j.at("pool_pages"), 64) << "page_bytes " << j.at("page_bytes");
  const json& rows = j.at("results");
  ASSERT_EQ(rows.size(), 3u);
  const auto expect_partial = [&](const json& row, int refused, int failed) {
    SCOPED_TRACE(row.at("policy").get<std::string>());
    EXPECT_EQ(row.at("requests_refused"), refused);
    EXPECT_EQ(row.at("requests_failed"), failed);
    EXPECT_EQ(row.at("requests_completed"), 3);
    EXPECT_EQ(row.at("all_completed"), false);
    EXPECT_TRUE(row.at("output_tokens_per_s").is_null());
    EXPECT_TRUE(row.at("requests_per_s").is_null());
    EXPECT_TRUE(row.at("roofline").at("achieved_fraction").is_null());
    EXPECT_TRUE(row.at("roofline").at("generation_fraction").is_null());
    EXPECT_TRUE(row.at("generation_tokens_per_s").is_null());
    EXPECT_TRUE(row.at("ratios_vs_paged_fp16").at("output_tokens_per_s").is_null());
    EXPECT_GT(row.at("partial_output_tokens_per_s").get<double>(), 0.0);
  };
  expect_partial(rows[0], 1, 1);
  expect_partial(rows[1], 0, 1);
  EXPECT_EQ(rows[2].at("all_completed"), true);
  EXPECT_GT(rows[2].at("output_tokens_per_s").get<double>(), 0.0);
  EXPECT_TRUE(rows[2].at("ratios_vs_paged_fp16").at("output_tokens_per_s").is_null())
      << "no ratio against a baseline that did not complete";
  // The table: refused/failed counts, '-' for the rates, and a line per partial row.
  for (const char* line : {"contiguous: 1 of 4 requests refused at submission, 0 failed while running: no throughput",
                           "paged-fp16: 0 of 4 requests refused at submission, 1 failed while running: no throughput",
                           "needs 120 pages, the pool has 64"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  const std::size_t row = r.output.find("\ncontiguous ");
  ASSERT_NE(row, std::string::npos) << r.output;
  const std::string contiguous = r.output.substr(row + 1, r.output.find('\n', row + 1) - row - 1);
  // Columns: policy, done/sub, ref/fail, tok/s, req/s, ...
  std::istringstream cells(contiguous);
  std::vector<std::string> cell(5);
  for (std::string& c : cell) cells >> c;
  EXPECT_EQ(cell[1], "3/4") << contiguous;
  EXPECT_EQ(cell[2], "1/0") << contiguous;
  EXPECT_EQ(cell[3], "-") << "no throughput over 3 of 4 requests: " << contiguous;
  EXPECT_EQ(cell[4], "-") << contiguous;
}

// Without --kv-budget the budget holds --kv-budget-requests of the workload's longest request
// (prompt + output) in full fp16: here 2 x (40 + 200 tokens: 15 pages of 16 tokens for each of
// kvcheck-tiny's 4 x 2 layer heads) = 240 pages, not the 512-token context's 2 x 256.
TEST(BenchServingCli, TheDefaultBudgetHoldsNOfTheLongestRequests) {
  testing::TempDir dir;
  testing::write_file(dir / "w.jsonl", "{\"prompt_tokens\": 12, \"output_tokens\": 4}\n"
                                       "{\"prompt_tokens\": 40, \"output_tokens\": 200}\n");
  const CliRun r = run_kvcheck("bench --workload-file " + shell_quote(dir / "w.jsonl") +
                               " --policies '' --kv-budget-requests 2 --quiet --json " + shell_quote(dir / "s.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = json::parse(testing::read_file(dir / "s.json"));
  EXPECT_EQ(j.at("workload").at("longest_request_tokens"), 240);
  EXPECT_EQ(j.at("kv_budget_requests"), 2);
  EXPECT_EQ(j.at("pool_pages"), 240);
  EXPECT_EQ(j.at("kv_budget_bytes").get<std::int64_t>(), 240 * j.at("page_bytes").get<std::int64_t>());
  EXPECT_NE(r.output.find("2 of the workload's longest request, 240 tokens, in full fp16"), std::string::npos)
      << r.output;
  expect_sane(j, 2);
}

TEST(BenchServingCli, SavedWorkloadReplaysTheSameRequests) {
  testing::TempDir dir;
  const std::filesystem::path saved = dir / "w.jsonl", a = dir / "a.json", b = dir / "b.json";
  CliRun r = run_kvcheck("bench --workload reasoning --requests 5 --rate 50 --policies kivi2 --quiet --save-workload " +
                         shell_quote(saved) + " --json " + shell_quote(a));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_kvcheck("bench --workload-file " + shell_quote(saved) + " --policies kivi2 --quiet --json " + shell_quote(b));
  ASSERT_EQ(r.code, 0) << r.output;
  const json ja = json::parse(testing::read_file(a)), jb = json::parse(testing::read_file(b));
  expect_sane(jb, 5);
  EXPECT_EQ(jb.at("workload").at("name"), "file");
  EXPECT_EQ(ja.at("workload").at("mean_prompt_tokens"), jb.at("workload").at("mean_prompt_tokens"));
  EXPECT_EQ(ja.at("workload").at("mean_output_tokens"), jb.at("workload").at("mean_output_tokens"));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ja.at("results")[i].at("output_tokens"), jb.at("results")[i].at("output_tokens"));
  }
}

TEST(BenchServingCli, BadInputIsNamedBeforeAnythingRuns) {
  testing::TempDir dir;
  testing::write_file(dir / "bad.jsonl", "{\"prompt_tokens\": 10, \"output_tokens\": 5}\n{\"prompt_tokens\": 10}\n");
  CliRun r = run_kvcheck("bench --workload-file " + shell_quote(dir / "bad.jsonl") + " --quiet");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("output_tokens"), std::string::npos) << r.output;
  r = run_kvcheck("bench --workload chat --requests 2 --policies int8,no-such-policy --quiet");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no-such-policy"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("contiguous "), std::string::npos) << "nothing ran: " << r.output;
  r = run_kvcheck("bench --workload chat --fragmentation --quiet");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("one mode at a time"), std::string::npos) << r.output;
  r = run_kvcheck("bench --workload chat --dummy-weights --shape gpt5 --quiet");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--shape: gpt5: is not a known shape (llama3-8b"), std::string::npos) << r.output;
  r = run_kvcheck("bench --workload chat --dummy-weights --quiet");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("needs --shape"), std::string::npos) << r.output;
}

// Dummy weights of a named shape, no checkpoint: the run serves every request of the workload.
TEST(BenchServingCli, DummyWeightsServeWithoutACheckpoint) {
  testing::TempDir dir;
  const CliRun r = run_kvcheck("bench --workload chat --requests 6 --policies int8 --dummy-weights --shape kvcheck-tiny "
                               "--dummy-layers 2 --quiet --json " + shell_quote(dir / "b.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(testing::read_file(dir / "b.json"));
  EXPECT_EQ(j.at("model"), "dummy:kvcheck-tiny");
  ASSERT_EQ(j.at("results").size(), 3u);
  for (const nlohmann::json& row : j.at("results")) {
    EXPECT_EQ(row.at("requests_completed"), 6) << row.at("policy");
    EXPECT_EQ(row.at("output_tokens"), row.at("tokens_requested")) << row.at("policy");
  }
}

}  // namespace
}  // namespace kvcheck
