// The report's regression gate (cli/report_baseline.h) on hand-made rows: what regresses and what
// does not at the tolerances' edges, a lost row, oracle violations; the baseline parser's errors
// name the field; the Pareto front of a known set of points.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/report_baseline.h"
#include "cli/report_html.h"
#include "reference/errors.h"

namespace kvcheck::cli {
namespace {

BaselineRow row(const std::string& policy, double kl, double ppl, std::optional<double> acc, std::int64_t n) {
  BaselineRow r;
  r.policy = policy;
  r.kl_mean = kl;
  r.perplexity_ratio = ppl;
  r.retrieval_accuracy = acc;
  r.retrieval_items = n;
  return r;
}

ReportBaseline baseline() {
  ReportBaseline b;
  b.rows = {row("int8", 1e-4, 1.01, 1.0, 12), row("h2o:budget=32", 0.02, 1.05, 0.5, 48), row("fp8", 1e-3, 1.0, std::nullopt, 0)};
  return b;  // default tolerances: kl 5% + 1e-7, ppl 0.5%, accuracy 2 sigma (at least one item)
}

TEST(ReportBaseline, WithinTolerancePasses) {
  const std::vector<BaselineRow> now = {row("int8", 1.049e-4, 1.015, 11.0 / 12.0, 12),  // one item of 12: allowed
                                        row("h2o:budget=32", 0.02, 1.05, 0.5 - 0.14, 48),  // 2 sigma = 0.144
                                        row("fp8", 1.05e-3, 1.004, std::nullopt, 0)};
  EXPECT_TRUE(compare_to_baseline(baseline(), now).empty()) << regression_table(compare_to_baseline(baseline(), now));
}

TEST(ReportBaseline, EachMetricRegressesPastItsTolerance) {
  std::vector<BaselineRow> now = {row("int8", 1.06e-4, 1.016, 10.0 / 12.0, 12),  // all three past the edge
                                  row("h2o:budget=32", 0.02, 1.05, 0.5 - 0.15, 48)};
  now[1].oracle_violations = 3;
  const std::vector<Regression> r = compare_to_baseline(baseline(), now);
  std::vector<std::string> found;
  for (const Regression& x : r) found.push_back(x.policy + "/" + x.metric);
  EXPECT_EQ(found, (std::vector<std::string>{"int8/kl_mean", "int8/perplexity_ratio", "int8/retrieval_accuracy",
                                             "h2o:budget=32/retrieval_accuracy", "h2o:budget=32/oracle_violations",
                                             "fp8/missing"}));
  const std::string table = regression_table(r);
  EXPECT_NE(table.find("int8"), std::string::npos) << table;
  EXPECT_NE(table.find("-16.7 pt"), std::string::npos) << "two items of twelve: " << table;
  EXPECT_NE(table.find("lost"), std::string::npos) << table;
}

TEST(ReportBaseline, ParserNamesTheField) {
  const auto expect_error = [](const std::string& text, const std::string& needle) {
    try {
      parse_report_baseline(text, "b.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("{", "b.json: json: is not valid JSON");
  expect_error(R"({"format": "other", "version": 1, "rows": []})", "b.json: format");
  expect_error(R"({"format": "kvcheck-report-baseline", "version": 2, "rows": []})", "b.json: version");
  expect_error(R"({"format": "kvcheck-report-baseline", "version": 1, "rows": [{"policy": "a", "perplexity_ratio": 1}]})",
               "b.json: rows[0]: kl_mean: missing");
  expect_error(R"({"format": "kvcheck-report-baseline", "version": 1, "rows": [{"policy": "a", "kl_mean": -1, "perplexity_ratio": 1}]})",
               "rows[0]: kl_mean: must be finite and >= 0");
  expect_error(R"({"format": "kvcheck-report-baseline", "version": 1, "rows": [{"policy": "a", "kl_mean": 0, "perplexity_ratio": 1, "retrieval_accuracy": 0.5, "retrieval_items": 0}]})",
               "rows[0]: retrieval_items");
  // Found by the report_baseline fuzzer (datasets/fuzz/report_baseline/regression-*): a count far
  // beyond int64 was cast unchecked.
  expect_error(R"({"format": "kvcheck-report-baseline", "version": 1, "rows": [{"policy": "a", "kl_mean": 0, "perplexity_ratio": 1, "retrieval_accuracy": 0, "retrieval_items": 13333333333333318492}]})",
               "rows[0]: retrieval_items: must be an integer in [1, 2^53]");
  expect_error(R"({"format": "kvcheck-report-baseline", "version": 1, "rows": [{"policy": "a", "kl_mean": 0, "perplexity_ratio": 1, "oracle_violations": 1e300}]})",
               "rows[0]: oracle_violations");
  expect_error(R"({"format": "kvcheck-report-baseline", "version": 1, "rows": [{"policy": "a", "kl_mean": 0, "perplexity_ratio": 1}, {"policy": "a", "kl_mean": 0, "perplexity_ratio": 1}]})",
               "rows[1]: policy: a appears twice");
  expect_error(R"({"format": "kvcheck-report-baseline", "version": 1, "tolerances": {"kl_rel": "x"}, "rows": []})",
               "tolerances: kl_rel");
  // Round trip of what --update-baseline writes.
  const nlohmann::json written = make_report_baseline({{"prompts", 2}}, baseline().rows, BaselineTolerances{});
  const ReportBaseline back = parse_report_baseline(written.dump(), "w.json");
  ASSERT_EQ(back.rows.size(), 3u);
  EXPECT_EQ(back.rows[1].retrieval_items, 48);
  EXPECT_FALSE(back.rows[2].retrieval_accuracy.has_value());
  EXPECT_EQ(back.settings, (nlohmann::json{{"prompts", 2}}));
}

TEST(ReportBaseline, ParetoFrontOfKnownPoints) {
  // (bytes, KL): the front is the lower-left staircase.
  const std::vector<double> x{0.2, 0.3, 0.5, 0.5, 1.0, 0.25};
  const std::vector<double> y{0.05, 0.01, 0.02, 0.001, 0.0, 0.06};
  EXPECT_EQ(pareto_front(x, y, true), (std::vector<std::size_t>{0, 1, 3, 4}));
  // (bytes, accuracy): higher is better.
  const std::vector<double> acc{0.1, 0.5, 0.4, 0.9, 0.9, 0.2};
  EXPECT_EQ(pareto_front(x, acc, false), (std::vector<std::size_t>{0, 5, 1, 3}));
}

TEST(ReportHtml, AxisTicksAreRoundNumbers) {
  // About five steps of 1, 2, 2.5 or 5 times a power of ten.
  EXPECT_DOUBLE_EQ(nice_step(2.1, 5, false), 0.5);
  EXPECT_DOUBLE_EQ(nice_step(1.0, 5, false), 0.2);
  EXPECT_DOUBLE_EQ(nice_step(0.55, 5, false), 0.1);
  EXPECT_DOUBLE_EQ(nice_step(212.0, 5, false), 50.0);
  EXPECT_DOUBLE_EQ(nice_step(12.0, 5, false), 2.0);
  EXPECT_DOUBLE_EQ(nice_step(15.0, 5, false), 2.5);
  // Integer axes (layers, decode steps) never step by a fraction: no 2.5, and at least 1.
  EXPECT_DOUBLE_EQ(nice_step(15.0, 5, true), 5.0);
  EXPECT_DOUBLE_EQ(nice_step(3.0, 8, true), 1.0);
  EXPECT_DOUBLE_EQ(nice_step(63.0, 8, true), 10.0);
  // The page's plots carry those ticks: the KV-bytes axis of a report whose rows reach 2.0 bytes
  // is labelled 0, 0.5, ..., 2.5, not fifths of 2.1.
  const auto row = [](const char* policy, double bytes, double kl, double acc) {
    return nlohmann::json{{"policy", policy},       {"kv_bytes_vs_fp16", bytes},
                          {"kl_mean", kl},          {"retrieval_accuracy", acc},
                          {"oracle_checks", 10},    {"oracle_violations", 0},
                          {"retrieval_accuracy_by_length", {{"128", acc}}}};
  };
  const nlohmann::json report = {
      {"format", "kvcheck-report"},
      {"version", 1},
      {"command", "kvcheck report"},
      {"model", {{"path", "m"}, {"hash", "0"}}},
      {"settings", {{"prompts", 1}, {"prompt_tokens", 8}, {"continuation_tokens", 4}, {"retrieval_items", 1}}},
      {"reference", {{"perplexity", 50.0}}},
      {"rows", {row("full-fp32", 2.0, 1e-12, 1.0), row("int8", 0.5625, 4e-5, 0.9)}}};
  const std::string html = report_html(report);
  for (const char* tick : {">0.5</text>", ">1.5</text>", ">2.5</text>", ">0.2</text>", ">0.8</text>"}) {
    EXPECT_NE(html.find(tick), std::string::npos) << tick;
  }
  EXPECT_EQ(html.find(">0.42</text>"), std::string::npos);
  EXPECT_EQ(html.find(">-0</text>"), std::string::npos);
}

// Each report colors its policy families from the palette's start in the order it meets them, so
// a report's page does not depend on the reports drawn before it in the same process (a
// process-wide map gave a later report's families the colors left over from earlier ones).
TEST(ReportHtml, FamilyColorsStartAfreshForEachReport) {
  const auto report = [](const std::vector<std::string>& policies) {
    nlohmann::json rows = nlohmann::json::array();
    for (const std::string& p : policies) {
      rows.push_back({{"policy", p}, {"kv_bytes_vs_fp16", 0.5}, {"kl_mean", 1e-3}, {"retrieval_accuracy", 0.5},
                      {"oracle_checks", 1}, {"oracle_violations", 0}, {"retrieval_accuracy_by_length", {{"128", 0.5}}}});
    }
    return nlohmann::json{{"format", "kvcheck-report"},
                          {"version", 1},
                          {"command", "kvcheck report"},
                          {"model", {{"path", "m"}, {"hash", "0"}}},
                          {"settings", {{"prompts", 1}, {"prompt_tokens", 8}, {"continuation_tokens", 4}, {"retrieval_items", 1}}},
                          {"reference", {{"perplexity", 50.0}}},
                          {"rows", rows}};
  };
  // The point's fill: the color attribute before its title.
  const auto fill_of = [](const std::string& html, const std::string& policy) {
    const std::size_t title = html.find("<title>" + policy + ":");
    const std::size_t fill = html.rfind("fill=\"", title);
    return title == std::string::npos || fill == std::string::npos ? std::string("?") : html.substr(fill + 6, 7);
  };
  const std::string first = report_html(report({"colortest-a:x=1", "colortest-c:x=1", "colortest-b:x=2"}));
  EXPECT_EQ(fill_of(first, "colortest-b:x=2"), "#2ca02c");  // third family met: third color
  const std::string later = report_html(report({"colortest-b:x=1"}));
  EXPECT_EQ(fill_of(later, "colortest-b:x=1"), "#1f77b4");  // its report's only family: the first color
}

}  // namespace
}  // namespace kvcheck::cli
